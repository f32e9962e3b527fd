"""The kit's checks of itself: the held-out corpus (accuracy), a real GPU (gpu_check), Colab's runtime
(colab_rehearsal).
"""
