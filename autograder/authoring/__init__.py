"""The instructor's tools: the student release, its Colab setup cell and the TA's Colab notebook,
publishing, slides, samples.
"""
