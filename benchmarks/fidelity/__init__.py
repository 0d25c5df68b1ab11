"""Does a median match an independent timing of the same work?"""
