"""A parallel corpus built in code for the offline demo: numbers in English words -> the same numbers in German words.

The task is small but a real translation: German reorders tens and units ("forty-two" -> "zweiundvierzig"),
writes everything below a million as one compound word ("two thousand twenty-four" ->
"zweitausendvierundzwanzig"), inflects "one" ("eins", "ein-", "eine Million") and has irregular forms
("sechzehn", "siebzig", "dreißig").

Conventions, used consistently:
- English is American style: "one hundred twenty-three" (no "and"), a hyphen between tens and units
  ("forty-two"), and always a leading "one" ("one hundred", "one thousand", "one million").
- German mirrors that leading "one": "einhundert", "eintausend", "eine Million" (never a bare "hundert" or
  "tausend"); a final one is "eins" ("einhunderteins"), "ein" inside a compound ("einundzwanzig",
  "einhunderteintausend") and "eine" before "Million(en)" ("einhunderteine Millionen"). Millions are separate
  words: "zwei Millionen dreihunderttausend".
"""

from __future__ import annotations

import contextlib
import operator
import os
import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

LIMIT = 10**9  # english_words and german_words cover 0 <= n < LIMIT

_EN_ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_EN_TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

# "eins" only stands for a final one; see _german_below_1000 for "ein" and "eine".
_DE_ONES = ["", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
_DE_TEENS = [
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]


def _check(n: int) -> int:
    n = operator.index(n)  # ints and integer-like numbers (numpy ints) only; a float raises TypeError
    if not 0 <= n < LIMIT:
        raise ValueError(f"{n} is out of range: numbers in words cover 0 to {LIMIT - 1:_}")
    return n


def _english_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_EN_ONES[hundreds]} hundred"] if hundreds else []
    if 10 <= rest < 20:
        words.append(_EN_TEENS[rest - 10])
    elif rest:
        tens, ones = divmod(rest, 10)
        words.append("-".join(word for word in (_EN_TENS[tens], _EN_ONES[ones]) if word))
    return " ".join(words)


def english_words(n: int) -> str:
    """`n` (0 <= n < 10**9) in English words, e.g. 2024 -> "two thousand twenty-four"."""
    n = _check(n)
    if n == 0:
        return "zero"
    millions, rest = divmod(n, 10**6)
    thousands, ones = divmod(rest, 1000)
    words = []
    for count, scale in ((millions, " million"), (thousands, " thousand"), (ones, "")):
        if count:
            words.append(_english_below_1000(count) + scale)
    return " ".join(words)


def _german_below_1000(n: int, final_one: str = "eins") -> str:
    """1 <= n < 1000 as one German word; a final bare one (n % 100 == 1) is written `final_one`."""
    hundreds, rest = divmod(n, 100)
    word = f"{'ein' if hundreds == 1 else _DE_ONES[hundreds]}hundert" if hundreds else ""
    if rest == 1:
        word += final_one
    elif 10 <= rest < 20:
        word += _DE_TEENS[rest - 10]
    elif rest:
        tens, ones = divmod(rest, 10)
        if tens == 0:
            word += _DE_ONES[ones]
        elif ones == 0:
            word += _DE_TENS[tens]
        else:  # units first: 42 -> zwei-und-vierzig
            word += f"{'ein' if ones == 1 else _DE_ONES[ones]}und{_DE_TENS[tens]}"
    return word


def german_words(n: int) -> str:
    """`n` (0 <= n < 10**9) in German words, e.g. 2024 -> "zweitausendvierundzwanzig", 10**6 -> "eine Million"."""
    n = _check(n)
    if n == 0:
        return "null"
    millions, rest = divmod(n, 10**6)
    thousands, ones = divmod(rest, 1000)
    words = []
    if millions:
        words.append(f"{_german_below_1000(millions, 'eine')} {'Million' if millions == 1 else 'Millionen'}")
    below_million = (f"{_german_below_1000(thousands, 'ein')}tausend" if thousands else "") + (
        _german_below_1000(ones) if ones else ""
    )
    if below_million:
        words.append(below_million)
    return " ".join(words)


def _sample_numbers(count: int, rng: random.Random, max_value: int) -> list[int]:
    """`count` distinct numbers in 0..max_value: a digit count drawn uniformly, then a uniform number of that many
    digits (so small numbers are as common as large ones); a digit count whose numbers are all taken is dropped."""
    count, max_value = operator.index(count), operator.index(max_value)
    _check(max_value)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count > max_value + 1:
        raise ValueError(f"cannot draw {count} distinct numbers from 0..{max_value} ({max_value + 1} numbers)")
    # digit count -> the inclusive range of the numbers with that many digits, capped at max_value
    buckets = {
        d: (0 if d == 1 else 10 ** (d - 1), min(10**d - 1, max_value)) for d in range(1, len(str(max_value)) + 1)
    }
    taken: dict[int, int] = dict.fromkeys(buckets, 0)
    seen: set[int] = set()
    numbers: list[int] = []
    open_buckets = sorted(buckets)
    while len(numbers) < count:
        digits = rng.choice(open_buckets)
        low, high = buckets[digits]
        n = rng.randint(low, high)
        if n in seen:
            continue
        seen.add(n)
        numbers.append(n)
        taken[digits] += 1
        if taken[digits] == high - low + 1:
            open_buckets.remove(digits)
    return numbers


def demo_splits(
    train_size: int = 20000, test_size: int = 500, seed: int = 0, max_value: int = 999_999
) -> dict[str, list[tuple[str, str]]]:
    """Disjoint "train", "validation" and "test" splits of (english, german) pairs; validation has test_size pairs.

    All numbers are drawn together, distinct, from 0..max_value: the number of digits is uniform over
    1..len(str(max_value)), then the number is uniform among those with that many digits, so one-digit numbers are as
    likely as six-digit ones. They are shuffled and then cut, so no number is in two splits (held-out numbers are
    truly unseen) and each split has the same distribution of sizes.
    """
    train_size, test_size = operator.index(train_size), operator.index(test_size)
    if train_size < 0 or test_size < 0:
        raise ValueError(f"split sizes must be >= 0, got train_size={train_size}, test_size={test_size}")
    rng = random.Random(seed)
    numbers = _sample_numbers(train_size + 2 * test_size, rng, max_value)
    # Small numbers run out first, so the draw order is not uniform in size; shuffling spreads them evenly.
    rng.shuffle(numbers)
    cuts = {"test": numbers[:test_size], "validation": numbers[test_size : 2 * test_size]}
    cuts["train"] = numbers[2 * test_size :]
    return {
        split: [(english_words(n), german_words(n)) for n in cuts[split]] for split in ("train", "validation", "test")
    }


def _write_atomically(path: Path, lines: Sequence[str]) -> None:
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(line + "\n" for line in lines)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def write_parallel_folder(
    folder: str | os.PathLike,
    splits: Mapping[str, Sequence[tuple[str, str]]],
    src_lang: str = "en",
    tgt_lang: str = "de",
) -> Path:
    """Write each split as line-aligned `{split}.{src_lang}` and `{split}.{tgt_lang}` files (train.en, train.de, ...),
    the layout `load_parallel` reads; each file is written to a temporary name in `folder`, then renamed into place.

    Creates `folder` if needed and returns it. Raises ValueError, before writing anything, for an empty split
    (the loader rejects empty files) or a sentence holding a line break (it would break the alignment).
    """
    if src_lang == tgt_lang:
        raise ValueError(f"source and target language are both {src_lang!r}")
    for split, pairs in splits.items():
        if not split or "/" in split or os.sep in split:
            raise ValueError(f"{split!r} is not a split name usable in a file name")
        if not pairs:
            raise ValueError(f"split {split!r} is empty")
        for number, pair in enumerate(pairs, 1):
            if len(pair) != 2:
                raise ValueError(f"split {split!r}, pair {number}: expected (source, target), got {pair!r}")
            if any("\n" in text or "\r" in text for text in pair):
                raise ValueError(f"split {split!r}, pair {number}: a sentence holds a line break: {pair!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        _write_atomically(folder / f"{split}.{src_lang}", [source for source, _ in pairs])
        _write_atomically(folder / f"{split}.{tgt_lang}", [target for _, target in pairs])
    return folder
