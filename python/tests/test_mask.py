"""Masked IDs and base62 text: the repository's mask vectors (tests/mask_vectors.txt), the
same here as in Rust, and checked against a Speck64/128 written in this file from the
paper's description (Beaulieu et al., IACR ePrint 2013/404), which gives the paper's own
vector; keys that cannot be used are exact errors."""

import os
import pathlib
import random

import pytest

import atomflake

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "mask_vectors.txt"

WORD = 0xFFFFFFFF


def _ror(value: int, bits: int) -> int:
    return ((value >> bits) | (value << (32 - bits))) & WORD


def _rol(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & WORD


def _round_keys(key: bytes) -> list[int]:
    """Speck64/128's key schedule: the key's four big-endian words, the last one first."""
    words = [int.from_bytes(key[i : i + 4], "big") for i in range(0, 16, 4)]
    keys, l = [words[3]], [words[2], words[1], words[0]]
    for i in range(26):
        l.append(((keys[i] + _ror(l[i], 8)) & WORD) ^ i)
        keys.append(_rol(keys[i], 3) ^ l[i + 3])
    return keys


def _encrypt(keys: list[int], block: int) -> int:
    x, y = block >> 32, block & WORD
    for k in keys:
        x = ((_ror(x, 8) + y) & WORD) ^ k
        y = _rol(y, 3) ^ x
    return x << 32 | y


def _mask(keys: list[int], id: int) -> int:
    """Speck cycle-walked within the ID's half of the 64-bit numbers."""
    masked = _encrypt(keys, id)
    while (masked ^ id) >> 63:
        masked = _encrypt(keys, masked)
    return masked


def _vectors() -> tuple[bytes, list[tuple[int, int]]]:
    lines = [line for line in VECTORS.read_text().splitlines() if not line.startswith("#")]
    key = bytes.fromhex(lines[0].removeprefix("key "))
    return key, [(int(id), int(masked)) for id, masked in (line.split() for line in lines[1:])]


def test_this_files_speck_gives_the_papers_vector() -> None:
    keys = _round_keys(bytes.fromhex("1b1a1918131211100b0a090803020100"))
    assert _encrypt(keys, 0x3B7265747475432D) == 0x8C6FA548454E028B


def test_the_vectors_mask_and_unmask_as_fixed_and_as_this_files_speck_does() -> None:
    key, vectors = _vectors()
    mask, keys = atomflake.Mask(key), _round_keys(key)
    assert len(vectors) == 7
    for id, masked in vectors:
        assert mask.mask(id) == masked == _mask(keys, id)
        assert mask.unmask(masked) == id
    generator = random.Random(7)
    for _ in range(1000):
        key = generator.randbytes(16)
        id = generator.getrandbits(64)
        assert atomflake.Mask(key).mask(id) == _mask(_round_keys(key), id)


def test_a_key_file_of_hex_or_bytes_is_the_key_and_others_are_refused(tmp_path: pathlib.Path) -> None:
    key, vectors = _vectors()
    hex_file, raw_file, open_file = tmp_path / "hex.key", tmp_path / "raw.key", tmp_path / "open.key"
    hex_file.write_text(key.hex() + "\n")
    raw_file.write_bytes(key)
    open_file.write_bytes(key)
    for path, mode in [(hex_file, 0o600), (raw_file, 0o400), (open_file, 0o640)]:
        os.chmod(path, mode)
    for path in [hex_file, raw_file]:
        assert atomflake.Mask.from_key_file(path).mask(vectors[3][0]) == vectors[3][1]
    with pytest.raises(ValueError) as raised:
        atomflake.Mask.from_key_file(open_file)
    assert str(raised.value) == f"key file {open_file} has mode 640: a key file may be read and written by its owner alone (chmod 600)"
    with pytest.raises(ValueError) as short:
        atomflake.Mask(b"fifteen bytes..")
    assert str(short.value) == "key has 15 bytes: a key is 16 bytes"
    assert repr(atomflake.Mask(key)) == "Mask(...)"


def test_base62_sorts_as_the_ids_and_reads_back() -> None:
    ids = atomflake.Generator("twitter", node=5).next_ids(1000)
    texts = [atomflake.to_base62(id) for id in ids]
    assert all(len(text) == 11 for text in texts) and texts == sorted(texts)
    assert [atomflake.from_base62(text) for text in texts] == ids
    assert atomflake.to_base62(2**64 - 1) == "LygHa16AHYF" and atomflake.to_base62(1541815603606036480) == "1ptWyK4WgZU"
    with pytest.raises(ValueError) as raised:
        atomflake.from_base62("LygHa16AHYG")
    assert str(raised.value) == 'base62 id "LygHa16AHYG" is out of range: ids allow 00000000000..=LygHa16AHYF'
