"""The vocabulary every layer speaks: job states and specs, ids, arrays, dependencies, times,
limits, output paths. Pure values and functions; it imports no other gbatch folder."""
