"""Model backends."""

from memrisk.models.backend import DecodeState, LanguageModel, load_model, smollm2_directory

__all__ = ["DecodeState", "LanguageModel", "load_model", "smollm2_directory"]
