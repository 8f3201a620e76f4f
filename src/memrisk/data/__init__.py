"""Data sources and windowing."""

from memrisk.data.sources import Document, read_documents
from memrisk.data.windows import Window, WindowSet, make_windows

__all__ = ["Document", "Window", "WindowSet", "make_windows", "read_documents"]
