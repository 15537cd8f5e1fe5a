"""A lexical shortlist from a prepared training corpus, by sentence co-occurrence.

The translation-probability estimate is p(t|s) = c(s, t) / c(s): of the training pairs whose source holds token s,
the share whose target holds token t. For each source token its K candidates are the target tokens of highest p(t|s)
that co-occur with it at least `min_count` times, leaving out the N most frequent target tokens, which every batch
gets anyway (so that the K slots go to the tokens that translate s, not to "the" and "."). What was tried beside it,
and why this was kept: docs/experiments/shortlist.md.

The counts are the sparse product S^T T of the pairs' source and target incidence matrices (scipy), computed for a
block of source tokens at a time so that memory stays bounded at any corpus size; the corpus is read from its
memory-mapped Arrow files, a slice of pairs at a time.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import sparse

from ..lexical_shortlist import LexicalShortlist

SCORE = "p(t|s) by sentence co-occurrence, the frequent tokens left out"
SLICE_PAIRS = 100_000  # pairs read from the Arrow file at a time
# token pairs (a source token and a target token of the same sentence pair) counted in one block of source tokens:
# the block's count matrix holds at most this many entries (12 bytes each)
PAIRS_A_BLOCK = 30_000_000


def build_shortlist(
    train,
    source_vocab_size: int,
    target_vocab_size: int,
    special_ids: list[int],
    candidates: int,
    frequent: int,
    min_count: int,
    metadata: dict | None = None,
) -> LexicalShortlist:
    """The shortlist of a prepared training split (`input_ids`, `labels` columns of token ids)."""
    special = np.unique(np.asarray([i for i in special_ids if 0 <= i < target_vocab_size], dtype=np.int64))
    source_counts, target_counts, pairs_per_source = _token_counts(train, source_vocab_size, target_vocab_size, special)
    target_order = np.argsort(-target_counts, kind="stable")
    common = target_order[: min(frequent, int((target_counts > 0).sum()))]
    left_out = np.zeros(target_vocab_size, dtype=bool)
    left_out[common] = True
    left_out[special[special < target_vocab_size]] = True

    table = np.full((source_vocab_size, candidates), -1, dtype=np.int32)
    for low, high in _source_blocks(pairs_per_source):
        counts = _cooccurrence(train, low, high, source_vocab_size, target_vocab_size, special)
        for row in range(high - low):
            start, end = counts.indptr[row], counts.indptr[row + 1]
            targets, together = counts.indices[start:end], counts.data[start:end]
            keep = (together >= min_count) & ~left_out[targets]
            targets, together = targets[keep], together[keep]
            if len(targets) > candidates:
                best = np.argpartition(-together, candidates - 1)[:candidates]
                targets, together = targets[best], together[best]
            # highest p(t|s) first, ties by id: the same corpus gives the same file
            order = np.lexsort((targets, -together))
            table[low + row, : len(order)] = targets[order]
    always = np.union1d(common, special).astype(np.int32)
    described = {
        "source_vocab_size": source_vocab_size,
        "target_vocab_size": target_vocab_size,
        "candidates": candidates,
        "frequent": frequent,
        "min_count": min_count,
        "score": SCORE,
        "pairs": int(train.num_rows),
        **(metadata or {}),
    }
    return LexicalShortlist(torch.from_numpy(table), torch.from_numpy(always), described)


def _slices(train):
    """(source ids, source offsets, target ids, target offsets) of `SLICE_PAIRS` pairs at a time, as numpy views of
    the Arrow buffers."""
    for table in train.with_format("arrow").iter(batch_size=SLICE_PAIRS):
        columns = []
        for name in ("input_ids", "labels"):
            column = table.column(name).combine_chunks()
            # a slice's offsets point into the whole child array
            offsets = column.offsets.to_numpy()
            columns += [column.values.to_numpy()[offsets[0] : offsets[-1]], offsets - offsets[0]]
        yield columns


def _incidence(ids: np.ndarray, offsets: np.ndarray, width: int, special: np.ndarray) -> sparse.csr_matrix:
    """Pairs x tokens, 1 where a pair holds the token (the special tokens left out)."""
    rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    keep = ~np.isin(ids, special)
    matrix = sparse.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.int32), (rows[keep], ids[keep].astype(np.int64))),
        shape=(len(offsets) - 1, width),
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1
    return matrix


def _token_counts(train, source_vocab_size: int, target_vocab_size: int, special: np.ndarray):
    """Pairs holding each source token; occurrences of each target token; for each source token, the token pairs it
    makes with the targets of its sentences (the work and memory its rows of the count matrix take)."""
    source_counts = np.zeros(source_vocab_size, dtype=np.int64)
    target_counts = np.zeros(target_vocab_size, dtype=np.int64)
    pairs_per_source = np.zeros(source_vocab_size, dtype=np.int64)
    for source_ids, source_offsets, target_ids, target_offsets in _slices(train):
        source = _incidence(source_ids, source_offsets, source_vocab_size, special)
        target = _incidence(target_ids, target_offsets, target_vocab_size, special)
        source_counts += np.asarray(source.sum(axis=0)).ravel()
        kept = target_ids[~np.isin(target_ids, special)]
        target_counts += np.bincount(kept, minlength=target_vocab_size)[:target_vocab_size]
        targets_per_pair = np.diff(target.indptr)
        pairs_per_source += np.asarray(source.T @ targets_per_pair).ravel().astype(np.int64)
    return source_counts, target_counts, pairs_per_source


def _source_blocks(pairs_per_source: np.ndarray):
    """Ranges of source ids, each making at most `PAIRS_A_BLOCK` token pairs (or one id, if it alone makes more)."""
    low, total = 0, 0
    for token, pairs in enumerate(pairs_per_source):
        if total and total + pairs > PAIRS_A_BLOCK:
            yield low, token
            low, total = token, 0
        total += pairs
    yield low, len(pairs_per_source)


def _cooccurrence(train, low: int, high: int, source_vocab_size: int, target_vocab_size: int, special: np.ndarray):
    """c(s, t) for source tokens low..high-1 (rows) and every target token: the pairs holding both."""
    counts = sparse.csr_matrix((high - low, target_vocab_size), dtype=np.int32)
    for source_ids, source_offsets, target_ids, target_offsets in _slices(train):
        source = _incidence(source_ids, source_offsets, source_vocab_size, special)[:, low:high]
        target = _incidence(target_ids, target_offsets, target_vocab_size, special)
        counts = counts + (source.T.tocsr() @ target)
    counts.sort_indices()
    return counts
