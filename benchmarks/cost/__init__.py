"""What does a sweep cost: its time, the fan-out, the history index, the JIT cache?"""
