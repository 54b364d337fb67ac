"""Diagnostics: the code registry, the `Diagnostic` type, and its renderers."""

from wgc.diagnostics.codes import REGISTRY, Severity
from wgc.diagnostics.diagnostic import NO_SPAN, Diagnostic, Label, SourceMap, Span, diag

__all__ = ["NO_SPAN", "REGISTRY", "Diagnostic", "Label", "Severity", "SourceMap", "Span", "diag"]
