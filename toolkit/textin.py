"""Text a user hands the toolkit, as their tools write it (pure).

Keys piped from PowerShell or saved by Notepad start with a byte-order mark, files from Windows
end their lines with CRLF, and a file saved in a legacy code page is not UTF-8. Read
literally, the mark becomes part of the first key (which then resolves to nothing, silently)
and a stray byte becomes U+FFFD inside a key. Every reader of user text decodes it here: a
mark is dropped (UTF-16 text with its mark is decoded as such), line ends of every platform
split lines, and bytes that are not UTF-8 are refused, naming the line.
Environment switches are read here too, so `TOOLKIT_DEBUG=false` means off everywhere.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping

__all__ = ["FALSE", "TRUE", "NotText", "decode", "lines", "switch"]

UTF8_BOM = codecs.BOM_UTF8
_UTF16 = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))

FALSE = frozenset({"", "0", "false", "no", "off", "n", "f"})
TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})


class NotText(ValueError):
    """Bytes a user gave as text that no encoding we accept can read (a usage error)."""


def decode(raw: bytes, what: str) -> str:
    """`raw` as text: a UTF-8 or UTF-16 byte-order mark chooses the encoding and is dropped,
    otherwise UTF-8. `NotText` names `what`, the line and the fix when it is not."""
    for bom, encoding in _UTF16:
        if raw.startswith(bom):
            try:
                return raw[len(bom) :].decode(encoding)
            except UnicodeDecodeError:
                raise NotText(f"{what}: starts as UTF-16 but is not: save it as UTF-8") from None
    body = raw[len(UTF8_BOM) :] if raw.startswith(UTF8_BOM) else raw
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as err:
        line = body[: err.start].count(b"\n") + 1
        raise NotText(
            f"{what}: line {line} is not UTF-8 (byte 0x{body[err.start]:02x}): "
            "save it as UTF-8 (keys and events are UTF-8 text)"
        ) from None


def lines(raw: bytes, what: str) -> list[str]:
    """The lines of `raw` (decoded as `decode` does), CR, LF and CRLF ends all ending one."""
    return decode(raw, what).splitlines()


def switch(environ: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean environment switch: unset is `default`; `0`, `false`, `no`, `off` (any case,
    spaces ignored) and empty are off; anything else is on."""
    value = environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in FALSE
