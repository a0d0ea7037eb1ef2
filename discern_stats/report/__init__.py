"""Report building blocks: every table and figure of the Quarto pages is a function here."""

from . import figures, tables
from .context import ReportContext, context
from .render import PAGES, RenderResult, render

__all__ = ["context", "ReportContext", "tables", "figures", "render", "RenderResult", "PAGES"]
