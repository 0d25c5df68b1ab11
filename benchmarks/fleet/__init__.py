"""Does a fleet of real SSH hosts hold up: killed and frozen hosts, profile over SSH?"""
