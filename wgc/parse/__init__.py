"""Parsing: `.walk` text -> lark parse tree (the AST) plus comments, or a syntax diagnostic."""

from wgc.parse.parser import Parser, ParseResult

__all__ = ["ParseResult", "Parser"]
