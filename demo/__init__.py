"""`make demo`: the main job end to end on the embedded defaults."""
