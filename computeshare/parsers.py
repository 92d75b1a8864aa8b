"""The API's JSON parser."""

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


def _has_lone_surrogate(data: Any) -> bool:
    """Whether any string in `data` (keys too) holds a lone surrogate. Walked with a stack, not
    by recursion: the data may be nested as deep as the parser allowed."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, which lets two kinds of malformed JSON through to a 500: nesting
    deeper than the interpreter's recursion limit (json raises RecursionError, not the
    ValueError DRF catches), and `"\\ud800"`, a lone surrogate that no UTF-8 text can hold, so
    that neither the database nor the renderer of the 400 that quotes it can write it. Both are
    a 400 `malformed_request` here, like any other JSON that does not parse."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise ParseError("JSON parse error - nested too deeply.") from error
        if _has_lone_surrogate(data):
            raise ParseError("JSON parse error - a string holds a lone surrogate (not Unicode).")
        return data
