"""Data: synthetic MoE scenarios, the thesis's toy generators, the ||X||_2 target, image loaders."""
