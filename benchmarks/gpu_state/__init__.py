"""How does what the GPU did before (order, neighbours, idle, clocks) move a number?"""
