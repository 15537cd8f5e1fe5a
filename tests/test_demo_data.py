"""The demo corpus: exact English and German number words, disjoint deterministic splits, the folder layout."""

import os

import pytest

from vanilla_transformer.demo.number_words import (
    demo_splits,
    english_words,
    german_words,
    write_parallel_folder,
)
from vanilla_transformer.tokenization import read_lines
from vanilla_transformer.training.corpus import load_parallel

GERMAN = {
    0: "null",
    1: "eins",  # a bare final one
    2: "zwei",
    5: "fünf",
    6: "sechs",
    7: "sieben",
    9: "neun",
    10: "zehn",
    11: "elf",
    12: "zwölf",
    13: "dreizehn",
    16: "sechzehn",  # not sechszehn
    17: "siebzehn",  # not siebenzehn
    19: "neunzehn",
    20: "zwanzig",
    21: "einundzwanzig",  # "ein" before "und"
    30: "dreißig",
    42: "zweiundvierzig",  # units first, one word
    60: "sechzig",
    66: "sechsundsechzig",
    70: "siebzig",
    77: "siebenundsiebzig",
    99: "neunundneunzig",
    100: "einhundert",
    101: "einhunderteins",
    111: "einhundertelf",
    121: "einhunderteinundzwanzig",
    123: "einhundertdreiundzwanzig",
    200: "zweihundert",
    999: "neunhundertneunundneunzig",
    1000: "eintausend",
    1001: "eintausendeins",
    1016: "eintausendsechzehn",
    2024: "zweitausendvierundzwanzig",
    11000: "elftausend",
    21000: "einundzwanzigtausend",
    100000: "einhunderttausend",
    101000: "einhunderteintausend",  # "ein" before "tausend"
    101101: "einhunderteintausendeinhunderteins",
    300000: "dreihunderttausend",
    123456: "einhundertdreiundzwanzigtausendvierhundertsechsundfünfzig",
    999999: "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
    1_000_000: "eine Million",
    1_000_001: "eine Million eins",
    2_000_000: "zwei Millionen",
    2_300_000: "zwei Millionen dreihunderttausend",
    21_000_000: "einundzwanzig Millionen",
    101_000_000: "einhunderteine Millionen",
    999_999_999: "neunhundertneunundneunzig Millionen neunhundertneunundneunzigtausendneunhundertneunundneunzig",
}

ENGLISH = {
    0: "zero",
    1: "one",
    12: "twelve",
    16: "sixteen",
    17: "seventeen",
    21: "twenty-one",
    30: "thirty",
    42: "forty-two",
    100: "one hundred",
    101: "one hundred one",
    123: "one hundred twenty-three",
    1000: "one thousand",
    2024: "two thousand twenty-four",
    101101: "one hundred one thousand one hundred one",
    1_000_000: "one million",
    2_300_000: "two million three hundred thousand",
    999_999_999: "nine hundred ninety-nine million nine hundred ninety-nine thousand nine hundred ninety-nine",
}


@pytest.mark.parametrize("number", sorted(GERMAN))
def test_german_words(number):
    assert german_words(number) == GERMAN[number]


@pytest.mark.parametrize("number", sorted(ENGLISH))
def test_english_words(number):
    assert english_words(number) == ENGLISH[number]


@pytest.mark.parametrize("number", [-1, 10**9, 10**12])
@pytest.mark.parametrize("words", [english_words, german_words])
def test_out_of_range_raises_naming_the_number(words, number):
    with pytest.raises(ValueError, match=str(number)):
        words(number)


def test_every_number_has_its_own_words():
    numbers = range(0, 20000, 7)
    assert len({german_words(n) for n in numbers}) == len({english_words(n) for n in numbers}) == len(numbers)


def drawn_pairs(count: int, seed: int, max_value: int = 999_999) -> list[tuple[str, str]]:
    """`count` numbers drawn by demo_splits, all in its training split."""
    return demo_splits(train_size=count, test_size=0, seed=seed, max_value=max_value)["train"]


def test_drawn_numbers_are_distinct_deterministic_and_cover_all_sizes():
    pairs = drawn_pairs(300, seed=1)
    assert len(pairs) == len(set(pairs)) == 300
    assert pairs == drawn_pairs(300, seed=1) and pairs != drawn_pairs(300, seed=2)
    lengths = {len(english.split()) for english, _ in pairs}
    assert 1 in lengths and max(lengths) >= 6  # one-word numbers and long six-digit ones
    assert all((english_words(n), german_words(n)) in set(drawn_pairs(10, seed=0, max_value=9)) for n in range(10))
    with pytest.raises(ValueError, match="distinct"):
        drawn_pairs(11, seed=0, max_value=9)


def test_demo_splits_are_disjoint_sized_and_deterministic():
    splits = demo_splits(train_size=2000, test_size=100, seed=3)
    assert {split: len(pairs) for split, pairs in splits.items()} == {"train": 2000, "validation": 100, "test": 100}
    sources = {split: {english for english, _ in pairs} for split, pairs in splits.items()}
    assert all(len(sources[split]) == len(splits[split]) for split in splits)  # no repeats inside a split
    assert not sources["train"] & sources["validation"]
    assert not sources["train"] & sources["test"]
    assert not sources["validation"] & sources["test"]
    assert splits == demo_splits(train_size=2000, test_size=100, seed=3)
    assert splits["test"] != demo_splits(train_size=2000, test_size=100, seed=4)["test"]


def test_write_parallel_folder_writes_aligned_files_the_loader_reads(tmp_path):
    splits = demo_splits(train_size=50, test_size=10, seed=0)
    folder = write_parallel_folder(tmp_path / "numbers", splits)
    names = sorted(os.listdir(folder))  # no temporary file left behind
    assert names == sorted(f"{split}.{lang}" for split in splits for lang in ("en", "de"))
    for split, pairs in splits.items():
        english, german = read_lines(folder / f"{split}.en"), read_lines(folder / f"{split}.de")
        assert len(english) == len(german) == len(pairs)
        assert list(zip(english, german, strict=True)) == pairs
    loaded = load_parallel(folder, "en", "de", split="validation")
    assert list(zip(loaded["en"], loaded["de"], strict=True)) == splits["validation"]
    write_parallel_folder(folder, {"train": [("one", "eins")]})  # rewriting replaces the old file
    assert read_lines(folder / "train.de") == ["eins"]


def test_write_parallel_folder_rejects_line_breaks_before_writing(tmp_path):
    with pytest.raises(ValueError, match="line break"):
        write_parallel_folder(tmp_path / "out", {"train": [("one", "eins"), ("two\nthree", "zwei")]})
    assert not (tmp_path / "out").exists()
