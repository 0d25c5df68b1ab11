"""What do diff and the integrity checks catch, and what do they flag wrongly?"""
