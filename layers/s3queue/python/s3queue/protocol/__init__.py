"""The key layout and the stored documents: each stored format has one module that writes and
reads it.
"""
