"""Utilities (:mod:`.generation`: ``InferenceParams`` for step-by-step decoding)."""
