"""The content cache of trained models: keys that move with the code, what a cache holds,
pruning."""
