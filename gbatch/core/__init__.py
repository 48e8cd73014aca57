"""The vocabulary every gbatch layer speaks, as pure values and functions.

Job states and specs, ids, arrays, dependencies, times, limits, output paths. It imports
no other gbatch folder.
"""
