"""From a tokenized corpus to the micro-batches of each step: token-budget batching (the plan of every epoch, a pure
function of the seed), padding, and a torch DataLoader whose workers collate micro-batches ahead of the step that
needs them."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator, Sequence

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerBase


def length_array(dataset: datasets.Dataset) -> np.ndarray:
    """The (source, target) token counts of the examples, shape (examples, 2), computed in Arrow: 8 bytes an
    example, whatever the corpus size, and nothing of the ids read into Python."""
    table = dataset.with_format("arrow")
    columns = [pc.list_value_length(table[column]).to_numpy(zero_copy_only=False) for column in ("input_ids", "labels")]
    return np.stack(columns, axis=1).astype(np.int32) if len(dataset) else np.zeros((0, 2), dtype=np.int32)


def mixed_training_pairs(
    train: datasets.Dataset, replay: datasets.Dataset | None, ratio: float | None, seed: int
) -> tuple[datasets.Dataset, np.ndarray]:
    """The training pairs, with a share `ratio` of them drawn from `replay` (pairs of an earlier domain, so that
    fine-tuning forgets less of it: --mix_dataset, --mix_ratio), and their (source, target) lengths. The replayed
    pairs are one draw with `seed`, a permutation repeated where the replay corpus is smaller than the draw; the two
    corpora are joined through an index, not copied."""
    lengths = length_array(train)
    if replay is None:
        return train, lengths
    if not len(replay):
        raise ValueError("the replay corpus (--mix_dataset) holds no training pair within the length limits")
    count = round(len(train) * ratio / (1 - ratio))
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.permutation(len(replay)) for _ in range(-(-count // len(replay)))])[:count]
    columns = ["input_ids", "labels"]
    joined = datasets.concatenate_datasets([train.select_columns(columns), replay.select_columns(columns).select(rows)])
    return joined, np.concatenate([lengths, length_array(replay)[rows]])


def sequence_lengths(dataset: datasets.Dataset) -> list[tuple[int, int]]:
    """`length_array` as a list of (source, target) pairs."""
    return [tuple(pair) for pair in length_array(dataset).tolist()]


def token_budget_order(
    lengths: Sequence[int] | Sequence[Sequence[int]] | np.ndarray, max_tokens: int, shuffle_seed: int | None = None
) -> list[np.ndarray]:
    """`token_budget_batches`, each batch an array of example indices (8 bytes an index, not a Python int's 36)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    sizes = np.asarray(lengths, dtype=np.int64)
    if sizes.ndim == 2:
        sizes = sizes.max(axis=1)
    if not len(sizes):
        return []
    rng = np.random.default_rng(shuffle_seed)
    order = rng.permutation(len(sizes)) if shuffle_seed is not None else np.arange(len(sizes))
    order = order[np.argsort(sizes[order], kind="stable")]  # stable: equal lengths keep the shuffled order
    sorted_sizes = sizes[order]
    # Sorted by length, a batch's longest example is its last: a batch starting at `start` takes the longest run of
    # k examples with k * sorted_sizes[start + k - 1] <= max_tokens, and at least the first (an over-long one alone).
    starts, start = [], 0
    while start < len(order):
        starts.append(start)
        window = sorted_sizes[start : start + max(1, max_tokens // max(int(sorted_sizes[start]), 1))]
        fits = np.arange(1, len(window) + 1) * window <= max_tokens
        start += len(window) if fits.all() else max(1, int(np.argmin(fits)))
    batches = np.split(order, starts[1:])
    if shuffle_seed is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def token_budget_batches(
    lengths: Sequence[int] | Sequence[Sequence[int]] | np.ndarray, max_tokens: int, shuffle_seed: int | None = None
) -> list[list[int]]:
    """Group example indices into batches of similar length whose padded size stays within `max_tokens`.

    `lengths` holds one length per example, or one (source, target) pair of lengths, of which the longer counts.
    As in fairseq, indices are sorted by length and batched greedily so that `len(batch) * longest <= max_tokens`;
    an example longer than `max_tokens` becomes a batch of its own. With `shuffle_seed`, ties in length are broken
    at random and the order of the batches is shuffled, both reproducibly. Every index appears in exactly one batch.
    """
    return [batch.tolist() for batch in token_budget_order(lengths, max_tokens, shuffle_seed)]


class BatchPlan:
    """The order of micro-batches, a pure function of the seed: epoch e is the token-budget batching of the
    training set shuffled with seed + e. A position (epoch, index) is all a checkpoint needs to resume."""

    def __init__(self, lengths: np.ndarray, max_tokens: int, seed: int):
        self.lengths, self.max_tokens, self.seed = np.asarray(lengths), max_tokens, seed
        self._epoch, self._batches = None, None

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        if epoch != self._epoch:
            self._epoch = epoch
            self._batches = token_budget_order(self.lengths, self.max_tokens, shuffle_seed=self.seed + epoch)
        return self._batches

    def take(self, epoch: int, index: int, count: int) -> tuple[list[np.ndarray], int, int]:
        taken = []
        while len(taken) < count:
            batches = self.epoch_batches(epoch)
            if index >= len(batches):
                epoch, index = epoch + 1, 0
                continue
            taken.append(batches[index])
            index += 1
        return taken, epoch, index

    def target_tokens(self, batches: list[np.ndarray]) -> int:
        return int(sum(self.lengths[batch, 1].sum() for batch in batches))


def seq2seq_collator(
    tokenizer: PreTrainedTokenizerBase, model=None, pad_to_multiple_of: int | None = None
) -> DataCollatorForSeq2Seq:
    """Pad tokenized examples into tensors: input_ids with the pad id (0), attention_mask, labels with -100; with
    `pad_to_multiple_of`, the lengths to a multiple of it.

    Given the model, the collator also builds `decoder_input_ids` from the labels (else the model does).
    """
    return DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt", pad_to_multiple_of=pad_to_multiple_of
    )


class MicroBatches(torch.utils.data.Dataset):
    """Item `indices` is the padded micro-batch of those examples: one Arrow read of the rows, then the collator."""

    def __init__(self, dataset: datasets.Dataset, collator):
        self.dataset, self.collator = dataset.select_columns(["input_ids", "labels"]), collator

    def __getitem__(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        rows = self.dataset[indices.tolist()]
        return self.collator([dict(zip(rows, values, strict=True)) for values in zip(*rows.values(), strict=True)])


class OwnMicroBatches(torch.utils.data.Sampler):
    """The micro-batches of this process, step after step from a position of the plan: of the
    processes x accumulation micro-batches of a step, process p takes those at p, p + processes, ..."""

    def __init__(self, plan: BatchPlan, epoch: int, index: int, processes: int, rank: int, accumulation: int):
        # a plan of its own: it runs ahead of the training loop's, and each keeps one epoch at hand
        self.plan = BatchPlan(plan.lengths, plan.max_tokens, plan.seed)
        self.start, self.processes, self.rank, self.accumulation = (epoch, index), processes, rank, accumulation

    def __iter__(self) -> Iterator[np.ndarray]:
        epoch, index = self.start
        while True:
            batches, epoch, index = self.plan.take(epoch, index, self.processes * self.accumulation)
            yield from batches[self.rank :: self.processes]


def micro_batch_loader(
    dataset: datasets.Dataset, collator, sampler: OwnMicroBatches, workers: int, prefetch: int, pin_memory: bool
) -> torch.utils.data.DataLoader:
    """A DataLoader of the sampler's micro-batches: with `workers`, background processes collate up to `prefetch`
    micro-batches each ahead of the step; the memory-mapped corpus is shared with them, not copied."""
    return torch.utils.data.DataLoader(
        MicroBatches(dataset, collator),
        sampler=sampler,
        batch_size=None,  # each item is a whole micro-batch already
        num_workers=workers,
        prefetch_factor=prefetch if workers else None,
        pin_memory=pin_memory,
        # its own: seeding the workers would otherwise draw from torch's global generator, whose state (dropout's)
        # a checkpoint saves, and a resumed run would start its loader one draw off an uninterrupted one
        generator=torch.Generator().manual_seed(0),
    )


class DataLoaderWorkerDied(RuntimeError):
    """A process of the data loader died (the out-of-memory killer, a signal) and the run stopped."""


# torch's words for it: "DataLoader worker (pid 123) is killed by signal: Killed." when the SIGCHLD handler sees a
# worker killed, "DataLoader worker (pid(s) 123) exited unexpectedly" when the loader finds it gone
_WORKER_DEATH = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? (?P<pids>[\d, ]+)\) "
    r"(?:is killed by signal: (?P<signal>[^.]+)|exited unexpectedly)"
)
_SIGNAL_NAMES = {signal.strsignal(number): number.name for number in signal.Signals if signal.strsignal(number)}


def worker_death(error: BaseException, workers=()) -> str | None:
    """What ended the run if a data loader worker died ("pid 123, killed by signal SIGKILL (Killed)"), else None.

    torch says so in three ways, by which of its parts notices first: its SIGCHLD handler ("DataLoader worker (pid
    123) is killed by signal: Killed."), its loader finding the worker gone ("... exited unexpectedly"), or none at
    all, the pipe from the worker broken under a read (ConnectionResetError). The signal then comes from the exit code
    of the worker's process among `workers` (the loader iterator's)."""
    match = _WORKER_DEATH.search(str(error))
    if match is not None or isinstance(error, (ConnectionError, EOFError)):
        for worker in workers:  # a pipe breaks as its process dies, an instant before the exit status is there
            if getattr(worker, "exitcode", 0) is None:
                try:
                    worker.join(timeout=1.0)
                except RuntimeError as again:  # torch's SIGCHLD handler, telling of the same death during the wait
                    if _WORKER_DEATH.search(str(again)) is None:
                        raise
    gone = [worker for worker in workers if getattr(worker, "exitcode", None) not in (None, 0)]
    if match is not None:
        pids = match["pids"].strip()
        gone = [worker for worker in gone if str(worker.pid) in pids.split(", ")]
    elif gone:
        pids = str(gone[0].pid)
    else:
        return None
    description = match["signal"].strip() if match is not None and match["signal"] else None
    if description is None:
        signals = [signal.Signals(-worker.exitcode) for worker in gone if worker.exitcode < 0]
        if not signals:
            codes = ", ".join(str(worker.exitcode) for worker in gone)
            return f"pid {pids}, exited with code {codes}" if codes else f"pid {pids}, exited unexpectedly"
        description = signal.strsignal(signals[0])
    name = _SIGNAL_NAMES.get(description)
    return (
        f"pid {pids}, killed by signal {name} ({description})"
        if name
        else f"pid {pids}, killed by signal {description}"
    )
