"""The training loop: Accelerate (CPU, one GPU, or many through `accelerate launch`), token-budget batches,
AdamW with the paper's inverse-square-root warm-up, exact resume, periodic evaluation, a Hub-ready output."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import platform
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from huggingface_hub import get_token
from tqdm.auto import tqdm
from transformers import GenerationConfig
from transformers.utils import CONFIG_NAME

from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, check_token_id_values
from .arguments import TOKENIZER_FIELDS, DataArguments, ModelArguments, TrainArguments, model_defining_switches
from .batches import (
    BatchPlan,
    DataLoaderWorkerDied,
    OwnMicroBatches,
    micro_batch_loader,
    mixed_training_pairs,
    seq2seq_collator,
    worker_death,
)
from .checkpoints import (
    TrainingState,
    average_weights,
    check_same_model,
    checkpoint_folders,
    partial_folder,
    prune,
    replace_folder,
    resolve_resume,
)
from .compiled_step import LENGTH_MULTIPLE, CompiledForward
from .corpus import (
    Corpus,
    check_beside_sources,
    prepare_corpus,
    prepare_evaluation_set,
    prepare_mix,
)
from .cpu_memory import keep_freed_memory
from .evaluation import translation_scores, validation_loss
from .flops import peak_tflops, training_flops
from .output_folder import (
    BEST,
    CHECKPOINTS,
    check_not_holding,
    check_output_folder,
    clear_earlier_run,
    push_output_folder,
    save_model_folder,
    validation_examples,
    write_results_and_card,
)
from .schedule import build_scheduler
from .starting_model import StartingModel
from .trained_parts import (
    add_lora,
    check_freeze,
    check_same_trained_parts,
    freeze,
    plain_model,
    save_adapter,
    save_trained_parts,
    trainable_parameters,
    trainable_summary,
)


@contextlib.contextmanager
def _quiet_shared_tensor_warning():
    """Accelerate warns on every checkpoint that it stored the tied embedding and output weights once; the model
    re-ties them on load (the resume test checks it), so the warning is noise repeated every `save_steps`."""
    accelerate_logger = logging.getLogger("accelerate.utils.other")
    level = accelerate_logger.level
    accelerate_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        accelerate_logger.setLevel(level)


def build_model(model_args: ModelArguments, tokenizer, seed: int) -> VanillaTransformerForConditionalGeneration:
    set_seed(seed)
    config = model_args.build_config(tokenizer)
    return VanillaTransformerForConditionalGeneration._from_config(
        config, attn_implementation=model_args.attn_implementation
    )


def load_weights(model, weights: dict[str, torch.Tensor]) -> None:
    """Load averaged weights, checked first so that a misfit leaves the model as it was; checkpoints store a tied
    matrix once, so only tied names may be absent."""
    own = model.state_dict()
    tied = set(getattr(model, "all_tied_weights_keys", {}))
    missing, unexpected = sorted(set(own) - set(weights) - tied), sorted(set(weights) - set(own))
    misshapen = sorted(name for name in set(own) & set(weights) if own[name].shape != weights[name].shape)
    if missing or unexpected or misshapen:
        raise ValueError(
            f"checkpoint weights do not fit the model: missing {missing}, unexpected {unexpected}, "
            f"of another shape {misshapen}"
        )
    model.load_state_dict(weights, strict=False)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training: the step under way finished and was saved as a checkpoint."""


class InterruptBetweenSteps:
    """While training, the first Ctrl-C (SIGINT) asks the loop to stop after the current step, so that the step is
    saved whole rather than cut off in the middle of an optimizer update; a second one interrupts at once."""

    def __init__(self, enabled: bool = True):
        # signal handlers can only be set from the main thread
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested = False

    def __enter__(self):
        if self.enabled:
            self.previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self.request)
        return self

    def request(self, signum, frame):
        self.requested = True
        signal.signal(signal.SIGINT, self.previous)
        print("\nstopping after this step and saving a checkpoint (Ctrl-C again stops at once)", file=sys.stderr)

    def __exit__(self, *exc):
        if self.enabled:
            signal.signal(signal.SIGINT, self.previous)


class RunEndedWithErrors(Exception):
    """Training finished and its model was written, but a step after it (averaging, scoring, publishing) failed."""


def use_cpu(asked: bool) -> bool:
    """Several processes on a machine without a GPU (torchrun, or `accelerate launch --multi_gpu`) run on the
    CPU with gloo; `accelerate launch --cpu --num_processes N` itself starts one process unless MPI is set up."""
    several_processes = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return asked or (several_processes and not torch.cuda.is_available())


def fused_adamw_supported(device: torch.device) -> bool:
    """Whether torch has AdamW's fused kernel (one kernel a step for all parameters, instead of a loop over them in
    Python, or a kernel a parameter) for this device."""
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices
    except ImportError:  # a private name, which a later torch may move: then the loop over parameters
        return False
    return device.type in _get_fused_kernels_supported_devices()


def wants_tensorboard(report_to: str) -> bool:
    if report_to == "none":
        return False
    available = importlib.util.find_spec("tensorboard") is not None
    if report_to == "tensorboard" and not available:
        raise ValueError("--report_to tensorboard needs the tensorboard package: pip install tensorboard")
    return available


class AfterSaving(Protocol):
    """Work of another room in the output folder once the model is saved, before the final scores: the command that
    joins the two rooms passes it (`train --shortlist`: the shortlist room's builder)."""

    def describe(self, run: TrainingRun) -> str:
        """What the step does, for the message of a run that ends with its failure."""

    def __call__(self, run: TrainingRun) -> dict:
        """Do it; returns the entries it adds to results.json."""


class SpeedWindow:
    """The steps since the last log line: their summed loss (a tensor on the device, read only when logged), tokens,
    model FLOPs, and their time without the saves and evaluations among them."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device)
        self.steps, self.tokens, self.flops = 0, 0, 0.0
        self.started, self.other_seconds = time.perf_counter(), 0.0

    def add(self, loss: torch.Tensor, tokens: int, flops: float) -> None:
        self.loss += loss
        self.steps += 1
        self.tokens += tokens
        self.flops += flops

    def seconds(self) -> float:
        return max(time.perf_counter() - self.started - self.other_seconds, 1e-9)

    @contextlib.contextmanager
    def aside(self, run: TrainingRun):
        """Time spent in the block (a save, an evaluation) is not the steps': left out of this window's time and of
        the launch's step time."""
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            self.other_seconds += spent
            run.launch_other_seconds += spent


class TrainingRun:
    """One training run. `run()` trains to max_steps (resuming if asked) and writes the output folder.
    `after_saving`: the steps of other rooms once the model is saved (`AfterSaving`)."""

    def __init__(
        self,
        model_args: ModelArguments,
        data_args: DataArguments,
        train_args: TrainArguments,
        corpus=None,
        after_saving: Sequence[AfterSaving] = (),
    ):
        self.model_args, self.data_args, self.args = model_args, data_args, train_args
        self.after_saving = list(after_saving)
        if train_args.shortlist and not self.after_saving:
            raise ValueError(
                "shortlist=True is built by vanilla_transformer.shortlist: run `vanilla-transformer train --shortlist`"
                ", or pass train(..., after_saving=[vanilla_transformer.shortlist.ShortlistAfterTraining()])"
            )
        if train_args.push_to_hub and not train_args.hub_repo_id:
            raise ValueError("--push_to_hub needs --hub_repo_id USER/NAME")
        if train_args.push_to_hub and not (train_args.hub_token or get_token()):
            # found out now, not after the training it would publish
            raise ValueError("--push_to_hub needs a Hugging Face token: --hub_token, HF_TOKEN, or `hf auth login`")
        self.output_dir = Path(train_args.output_dir)
        # seconds for the time budget; an attribute so that a test can drive the budget with a fake clock
        self.clock = time.monotonic
        self.checkpoint_root = self.output_dir / CHECKPOINTS
        tensorboard = wants_tensorboard(train_args.report_to)
        self.accelerator = Accelerator(
            cpu=use_cpu(train_args.use_cpu),
            mixed_precision=train_args.mixed_precision,
            # the warm-up counts optimizer steps whatever the number of processes; by default Accelerate would
            # advance the schedule once per process per step
            step_scheduler_with_optimizer=False,
            log_with="tensorboard" if tensorboard else None,
            project_dir=str(self.output_dir / "logs") if tensorboard else None,
        )
        # derived from tokens_per_step for this many processes, if it is set (again from the same arguments: the same)
        budget = train_args.micro_batches_for(self.accelerator.num_processes)
        train_args.max_tokens, train_args.gradient_accumulation_steps = budget
        # the model to start from: its config alone now, so that a switch set otherwise is refused before any load
        self.start = StartingModel.find(model_args.from_model) if model_args.from_model else None
        self.overrides = self.start.check_switches(model_args) if self.start else {}
        if train_args.lora_r is not None and self.start is None:
            raise ValueError(f"lora_r={train_args.lora_r} trains adapters on a trained model: pass --from_model")
        # every process, so that all of them stop
        check_output_folder(self.output_dir, bool(train_args.resume_from_checkpoint), train_args.overwrite_output_dir)
        if self.start is not None:
            check_not_holding(self.output_dir, self.start.source)
        check_beside_sources(data_args)
        check_freeze(train_args.freeze, self.switch_config())
        self.resume_folder = resolve_resume(self.checkpoint_root, train_args.resume_from_checkpoint)
        if self.resume_folder is not None:
            check_same_model(self.resume_folder, self.switch_config(), model_defining_switches())
            check_same_trained_parts(self.resume_folder, train_args)
        if self.accelerator.is_main_process:
            clear_earlier_run(self.output_dir, train_args)
        self.accelerator.wait_for_everyone()
        if train_args.keep_freed_cpu_memory and self.accelerator.device.type == "cpu":
            keep_freed_memory()
        self.corpus: Corpus = corpus or self.main_process_first(self.prepare_corpus)
        self.tokenizer = self.corpus.tokenizer
        # more evaluation sets, and the replay corpus, encoded with the run's tokenizer
        self.extra_eval = self.main_process_first(
            lambda: {
                name: prepare_evaluation_set(data_args, dataset, split, self.tokenizer)
                for name, dataset, split in data_args.extra_eval_sets()
            }
        )
        mix = self.main_process_first(lambda: prepare_mix(data_args, self.tokenizer)) if data_args.mix_dataset else None
        if self.start is not None:
            set_seed(train_args.seed)  # dropout's draws, as a run from scratch seeds them
            self.model = self.start.model(self.overrides, model_args.attn_implementation)
        else:
            self.model = build_model(model_args, self.tokenizer, train_args.seed)
        if self.resume_folder is not None:  # what the tokenizer decides, known now
            check_same_model(self.resume_folder, self.model.config, TOKENIZER_FIELDS)
        # saved with every folder (best and final), so that generate() decodes as the run evaluated; a trained
        # model's own settings (Marian's forbidden pad token) stay
        generation = copy.deepcopy(self.model.generation_config) if self.start else GenerationConfig()
        generation.update(
            num_beams=train_args.num_beams,
            max_new_tokens=train_args.max_new_tokens,
            length_penalty=train_args.length_penalty,
            bos_token_id=self.model.config.bos_token_id,
            eos_token_id=self.model.config.eos_token_id,
            pad_token_id=self.model.config.pad_token_id,
            decoder_start_token_id=self.model.config.decoder_start_token_id,
        )
        if train_args.max_new_tokens is not None:  # a saved max_length (Marian's 512) would only draw a warning
            generation.max_length = GenerationConfig().max_length
        self.model.generation_config = generation
        freeze(self.model, train_args.freeze)
        if train_args.lora_r is not None:
            self.model = add_lora(
                self.model, train_args.lora_r, train_args.lora_alpha, train_args.lora_dropout, train_args.lora_targets
            )
        self.trainable_parameters = trainable_parameters(self.model)
        self.accelerator.print(trainable_summary(self.model))
        # the model shifts the labels into decoder inputs itself: the collator, which runs in the data loader's
        # workers, needs no model; compiled, the lengths are padded to a multiple (see compiled_step.py)
        self.collator = seq2seq_collator(
            self.tokenizer, pad_to_multiple_of=LENGTH_MULTIPLE if train_args.torch_compile else None
        )
        optimizer = torch.optim.AdamW(
            [parameter for parameter in self.model.parameters() if parameter.requires_grad],
            lr=train_args.peak_learning_rate(self.model.config.d_model),
            betas=(train_args.adam_beta1, train_args.adam_beta2),
            eps=train_args.adam_epsilon,
            weight_decay=train_args.weight_decay,
            fused=fused_adamw_supported(self.accelerator.device) or None,
        )
        self.state = TrainingState()
        scheduler = build_scheduler(optimizer, train_args, self.state)
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(self.model, optimizer, scheduler)
        # the training forward and loss compiled (--torch_compile); evaluation and generate() use the model itself
        self.compiled = CompiledForward(self.model) if train_args.torch_compile else None
        self.peak_tflops = peak_tflops(self.accelerator.device, train_args.peak_tflops)
        self.train_pairs, lengths = mixed_training_pairs(self.corpus.train, mix, data_args.mix_ratio, train_args.seed)
        self.plan = BatchPlan(lengths, train_args.max_tokens, train_args.seed)
        self.micro_batches = None  # the data loader's iterator, started where the run starts (or resumes)
        self.data_wait = 0.0  # seconds the loop waited for micro-batches, since the last log line
        self.launch_data_wait, self.launch_seconds = 0.0, 0.0  # and in all of this launch, of its training time
        # of this launch: the tokens and model FLOPs of its steps, and the seconds of its training time spent saving
        # and evaluating instead (the speed is measured over the steps alone)
        self.launch_tokens, self.launch_flops, self.launch_other_seconds = 0, 0.0, 0.0
        if tensorboard:
            self.accelerator.init_trackers("train", config=self.hyperparameters())

    def switch_config(self):
        """The switches the model will have: the starting model's with the regularisation this run sets, or the
        flags' own."""
        if self.start is None:
            return self.model_args.switch_config()
        config = copy.deepcopy(self.start.config)
        for name, value in self.overrides.items():
            setattr(config, name, value)
        return config

    @property
    def unwrapped(self) -> VanillaTransformerForConditionalGeneration:
        return self.accelerator.unwrap_model(self.model)

    def hyperparameters(self) -> dict:
        values = {**vars(self.model_args), **vars(self.data_args), **vars(self.args)}
        return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in values.items()}

    def main_process_first(self, prepare):
        """`prepare()` in the main process while the others wait, then in the others, which find its result in the
        cache and map the same folder. Should it fail, the others are let go too, and fail preparing it themselves."""
        accelerator = self.accelerator
        if not accelerator.is_main_process:
            accelerator.wait_for_everyone()
        try:
            return prepare()
        finally:
            if accelerator.is_main_process:
                accelerator.wait_for_everyone()

    def prepare_corpus(self) -> Corpus:
        """The corpus, encoded with the starting model's tokenizer when the run starts from one (a --tokenizer with
        another vocabulary is refused, naming both)."""
        tokenizer = self.start.tokenizer(also_named=self.data_args.tokenizer) if self.start else None
        corpus = prepare_corpus(self.data_args, tokenizer)
        self.accelerator.print(f"corpus: {corpus.folder}" if corpus.folder else "corpus: in memory")
        return corpus

    def start_micro_batches(self) -> None:
        """The data loader from the run's position on: its workers collate the micro-batches ahead of the steps."""
        sampler = OwnMicroBatches(
            self.plan,
            self.state.epoch,
            self.state.batch_in_epoch,
            self.accelerator.num_processes,
            self.accelerator.process_index,
            self.args.gradient_accumulation_steps,
        )
        on_gpu = self.accelerator.device.type == "cuda"
        loader = micro_batch_loader(
            self.train_pairs,
            self.collator,
            sampler,
            self.args.dataloader_num_workers,
            self.args.dataloader_prefetch_factor,
            pin_memory=on_gpu,
        )
        self.micro_batches = iter(loader)

    def micro_batch(self) -> dict[str, torch.Tensor]:
        """The next micro-batch of this process, on the device; the time spent waiting for it is counted."""
        waited = time.perf_counter()
        batch = next(self.micro_batches)
        waited = time.perf_counter() - waited
        self.data_wait += waited
        self.launch_data_wait += waited
        if self.accelerator.device.type != "cpu":
            # checked here, on the CPU: the model does not read ids back from a device (it would wait for it)
            config = self.unwrapped.config
            check_token_id_values(batch["input_ids"], config.vocab_size, "input_ids")
            check_token_id_values(batch["labels"], config.target_vocab_size, "labels", ignore_index=-100)
        return {name: value.to(self.accelerator.device, non_blocking=True) for name, value in batch.items()}

    def summed_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss of a micro-batch summed over its target tokens, through the compiled forward under
        --torch_compile; the step divides it by its own token count outside, so that the compiled graph never sees
        a number that changes every step."""
        forward = self.compiled or self.model
        return forward(**batch, num_items_in_batch=1).loss

    def train_step(self) -> tuple[torch.Tensor, int, float]:
        """One optimizer step over world_size x accumulation micro-batches; returns (mean token loss of this
        process's share, tokens, model FLOPs). The loss stays a tensor on the device, so that the step never waits
        for the device to finish; the tokens (source and target, of every process) and their FLOPs come from the
        plan."""
        processes, accumulation = self.accelerator.num_processes, self.args.gradient_accumulation_steps
        batches, self.state.epoch, self.state.batch_in_epoch = self.plan.take(
            self.state.epoch, self.state.batch_in_epoch, processes * accumulation
        )
        # every process knows the whole step's batches, so it knows the step's target-token count without
        # communicating; DDP averages gradients over processes, hence the factor `processes`
        step_tokens = self.plan.target_tokens(batches)
        own_batches = batches[self.accelerator.process_index :: processes]
        step_loss = torch.zeros((), device=self.accelerator.device)
        for position in range(len(own_batches)):
            batch = self.micro_batch()  # the loader's sampler walks the same plan: these are own_batches
            last = position == len(own_batches) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
                loss = self.summed_loss(batch) / (step_tokens / processes)
                self.accelerator.backward(loss)
            step_loss += loss.detach() / processes
        if self.args.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        lengths = self.plan.lengths[np.concatenate(batches)]
        seen_tokens = int(lengths.sum())
        self.state.train_tokens += seen_tokens
        flops = training_flops(self.unwrapped.config, lengths[:, 0], lengths[:, 1]) if self.peak_tflops else 0.0
        return step_loss, seen_tokens, flops

    def checkpoint_folder(self) -> Path:
        """Where the checkpoint of the current step is (or will be) saved."""
        return self.checkpoint_root / f"step-{self.state.step}"

    def save_checkpoint(self) -> None:
        """Every process writes into a partial folder; once all are done it is renamed into place, so a checkpoint
        folder is complete or absent (a kill or a full disk during the save leaves only the partial one)."""
        folder = self.checkpoint_folder()
        partial = partial_folder(folder)
        if self.accelerator.is_main_process:
            shutil.rmtree(partial, ignore_errors=True)  # left by a save that was cut short
        self.accelerator.wait_for_everyone()
        with _quiet_shared_tensor_warning():
            self.accelerator.save_state(str(partial))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.state.save(partial)
            # the model's switches, which a resumed run is checked against before it loads the weights; with the
            # tokenizer and generation config, a checkpoint is a folder that --from_model and from_pretrained load
            self.unwrapped.config.to_json_file(partial / CONFIG_NAME)
            self.unwrapped.generation_config.save_pretrained(partial)
            self.tokenizer.save_pretrained(partial)
            save_trained_parts(self.args, partial)
            replace_folder(partial, folder)
            prune(self.checkpoint_root, max(self.args.save_total_limit, self.args.average_last_checkpoints))
        self.accelerator.wait_for_everyone()

    def evaluate(self, dataset, limit: int | None = None, model=None) -> dict[str, float]:
        model = model or self.unwrapped
        if limit is not None:
            dataset = dataset.select(range(min(limit, len(dataset))))
        loss = validation_loss(model, dataset, self.collator, self.args.max_tokens, self.accelerator.device)
        scores = translation_scores(
            model,
            self.tokenizer,
            dataset,
            self.data_args.source_lang,
            self.data_args.target_lang,
            num_beams=self.args.num_beams,
            max_new_tokens=self.args.max_new_tokens,
            batch_size=self.args.eval_batch_size,
            compound_split=self.args.compound_split_bleu,
        )
        return {"loss": loss, **scores}

    def evaluate_and_keep_best(self, whole: bool = False) -> dict:
        """Validation (and each extra evaluation set) scored, in the history; the best model by validation BLEU in
        best/. Returns {set name: scores}, "validation" first (empty outside the main process). `whole` sets are
        scored whole, not cut at max_eval_samples, as the final model is: the "before" of a run from a model."""
        scored = {}
        if self.accelerator.is_main_process:
            limit = None if whole else self.data_args.max_eval_samples
            scored = {"validation": self.evaluate(self.corpus.validation, limit)}
            scored.update((name, self.evaluate(dataset, limit)) for name, dataset in self.extra_eval.items())
            metrics = scored["validation"]
            entry = {"step": self.state.step, **metrics}
            if self.extra_eval:
                entry["sets"] = {name: scores for name, scores in scored.items() if name != "validation"}
            self.state.history.append(entry)
            # on lowercased training text, cased BLEU would mostly measure capitalisation
            score = metrics["bleu_lowercased" if self.data_args.lowercase else "bleu"]
            if score > self.state.best_bleu:
                self.state.best_bleu, self.state.best_step = score, self.state.step
                # a complete folder: translate and from_pretrained load it like the final one
                save_model_folder(plain_model(self.unwrapped), self.tokenizer, self.output_dir / BEST)
        self.accelerator.wait_for_everyone()
        return scored

    def evaluate_and_report(self, progress: tqdm, whole: bool = False) -> None:
        """`evaluate_and_keep_best`, written under the progress bar and logged: the validation scores, then each
        extra set's."""
        scored = self.evaluate_and_keep_best(whole)
        if not scored:
            return
        described = "; ".join(
            ("" if name == "validation" else f"{name}: ") + ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
            for name, scores in scored.items()
        )
        progress.write(f"step {self.state.step}: {described}")
        logged = {f"eval/{k}": v for k, v in scored["validation"].items()}
        logged.update((f"eval/{name}/{k}", v) for name, scores in scored.items() if name != "validation"
                      for k, v in scores.items())  # fmt: skip
        self.accelerator.log(logged, step=self.state.step)

    def resume(self) -> None:
        folder = self.resume_folder
        if folder is not None:
            self.accelerator.load_state(str(folder))
            self.state.load(folder)
            self.accelerator.print(f"resumed from {folder} at step {self.state.step}")

    def training_seconds(self, carried: float, launched: float) -> float:
        """Training time so far: `carried` from the launches before a resume, plus this one's. Under a time budget
        every process must stop at the same step and set the same learning rate, so with several processes the clock
        furthest on decides (a reduction every step, which waits for the device; one process reads its own clock)."""
        seconds = carried + self.clock() - launched
        if self.args.max_train_seconds is None or self.accelerator.num_processes == 1:
            return seconds
        seconds = torch.tensor(seconds, dtype=torch.float32, device=self.accelerator.device)
        return self.accelerator.reduce(seconds, "max").item()

    def out_of_time(self) -> bool:
        budget = self.args.max_train_seconds
        return budget is not None and self.state.train_seconds > budget

    def progress_bar(self) -> tqdm:
        """Over the steps; under a time budget, over its seconds with the steps in the postfix: the clock then ends
        the run, and an ETA from max_steps would be hours off."""
        budget = self.args.max_train_seconds
        options = dict(disable=self.args.disable_progress_bar or not self.accelerator.is_main_process, mininterval=1.0)
        if budget is None:
            return tqdm(total=self.args.max_steps, initial=self.state.step, desc="training", **options)
        spent = min(round(self.state.train_seconds), round(budget))
        return tqdm(total=round(budget), initial=spent, unit="s", desc="training (time budget)", **options)

    def advance(self, progress: tqdm) -> None:
        if self.args.max_train_seconds is None:
            progress.update(1)
        else:
            progress.update(min(round(self.state.train_seconds), progress.total) - progress.n)

    def run(self) -> dict:
        self.resume()
        progress = self.progress_bar()
        if self.state.step == 0 and (self.start is not None or self.extra_eval):
            # where the run starts: a trained model's own scores (proof that every weight loaded), the "before" of
            # every set, on the whole sets as the final model's "after"; outside the training time
            self.evaluate_and_report(progress, whole=True)
        self.model.train()
        carried, launched = self.state.train_seconds, self.clock()
        # with several processes each gets the signal at its own moment, and they must stop at the same step
        interrupt = InterruptBetweenSteps(enabled=self.accelerator.num_processes == 1)
        self.start_micro_batches()
        try:
            with interrupt:
                self.train_until_done(progress, carried, launched, interrupt)
        except Exception as error:
            died = worker_death(error, getattr(self.micro_batches, "_workers", ()))
            if died is None:
                raise
            raise DataLoaderWorkerDied(self.worker_death_message(died)) from error
        finally:
            self.micro_batches = None  # stops the loader's workers
        progress.close()
        self.state.train_seconds = self.training_seconds(carried, launched)
        self.launch_seconds = self.state.train_seconds - carried
        self.step_seconds = self.launch_seconds - self.launch_other_seconds
        if interrupt.requested:
            saved = self.checkpoint_folder()
            if not saved.is_dir():
                self.save_checkpoint()
            raise TrainingInterrupted(
                f"interrupted at step {self.state.step}: the run is saved in {saved}; --resume_from_checkpoint latest "
                "continues it"
            )
        if self.args.save_steps > 0 and self.state.step % self.args.save_steps:
            self.save_checkpoint()  # stopped by the clock between two checkpoints
        return self.finish()

    def worker_death_message(self, died: str) -> str:
        """What to say when a data loader worker died: which one and how, that the checkpoints are whole (a save
        writes a partial folder first), and how to go on."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resolve_resume names what it leaves out; here only the newest counts
            try:
                last = resolve_resume(self.checkpoint_root, "latest")
            except (ValueError, OSError):
                last = None
        if last is None:
            after = "no checkpoint was saved before it: start the run again"
        else:
            after = f"the last checkpoint, {last}, is intact: --resume_from_checkpoint latest continues the run"
        return (
            f"a data loader worker died ({died}) after step {self.state.step}; {after} (the out-of-memory killer sends "
            "SIGKILL: fewer --dataloader_num_workers or a smaller --dataloader_prefetch_factor take less memory)"
        )

    def train_until_done(self, progress: tqdm, carried: float, launched: float, interrupt) -> None:
        window = SpeedWindow(self.accelerator.device)
        self.data_wait = 0.0
        while self.state.step < self.args.max_steps and not interrupt.requested:
            # read before the step: the scheduler sets the next step's learning rate from it
            self.state.train_seconds = self.training_seconds(carried, launched)
            if self.out_of_time():
                break
            loss, tokens, flops = self.train_step()
            if self.state.step == self.args.warmup_steps:
                self.state.warmup_seconds = self.state.train_seconds
            window.add(loss, tokens, flops)
            self.launch_tokens += tokens
            self.launch_flops += flops
            self.advance(progress)
            if self.state.step % self.args.logging_steps == 0 or self.state.step == self.args.max_steps:
                self.log_window(progress, window)
                window = SpeedWindow(self.accelerator.device)
            if self.args.save_steps > 0 and self.state.step % self.args.save_steps == 0:
                with window.aside(self):
                    self.save_checkpoint()
            if self.args.eval_steps > 0 and self.state.step % self.args.eval_steps == 0:
                with window.aside(self):
                    self.evaluate_and_report(progress)

    def log_window(self, progress: tqdm, window: SpeedWindow) -> None:
        """The progress bar's postfix and the logged scalars of the steps since the last log line: their mean loss
        (read from the device here, the loop's only wait for it), learning rate, training tokens/s (and MFU on a GPU
        whose peak is known) over the time the steps took, saves and evaluations left out."""
        loss = (self.accelerator.reduce(window.loss) / window.steps).item()
        seconds = window.seconds()  # after the read, when the device has done the window's work
        rate, data_wait = window.tokens / seconds, self.data_wait / seconds
        learning_rate = self.scheduler.get_last_lr()[0]
        postfix = dict(
            step=f"{self.state.step}/{self.args.max_steps}",
            loss=f"{loss:.3f}",
            lr=f"{learning_rate:.2e}",
            tok_s=f"{rate:,.0f}",
            data_wait=f"{data_wait:.0%}",  # of the time: how much the steps waited for micro-batches
        )
        logged = {"train/loss": loss, "train/lr": learning_rate, "train/tokens_per_s": rate}
        logged["train/data_wait"] = data_wait
        if self.peak_tflops:
            mfu = self.model_flops_utilisation(window.flops, seconds)
            postfix["mfu"] = f"{mfu:.1%}"
            logged["train/mfu"] = mfu
        if self.compiled is not None:
            postfix["graphs"] = self.compiled.graphs
            logged["train/compiled_graphs"] = self.compiled.graphs
        progress.set_postfix(**postfix)
        self.accelerator.log(logged, step=self.state.step)
        self.data_wait = 0.0

    def model_flops_utilisation(self, flops: float, seconds: float) -> float:
        """Model FLOPs per second of every process, as a share of their peak (`flops.py`)."""
        return flops / max(seconds, 1e-9) / (self.peak_tflops * 1e12 * self.accelerator.num_processes)

    def finish(self) -> dict:
        """Average the last checkpoints if asked, write the model folder, score the model, write results.json and
        the card, and publish if asked. The training is never lost to a later step: a failed average leaves the last
        step's weights, the model folder is written before anything else can fail, and what failed is raised at
        the end, as one `RunEndedWithErrors`, once everything that could be done is done."""
        self.accelerator.wait_for_everyone()
        model = self.unwrapped
        failures, averaged = [], 1
        if self.args.average_last_checkpoints > 1:
            folders = checkpoint_folders(self.checkpoint_root)[-self.args.average_last_checkpoints :]
            try:
                load_weights(model, average_weights(folders))
                averaged = len(folders)
            except Exception as error:
                failures.append(
                    (f"averaging the last {len(folders)} checkpoints (the model is the last step's)", error)
                )
        results = {
            "train_steps": self.state.step,
            "averaged_checkpoints": averaged,
            "processes": self.accelerator.num_processes,
            "mixed_precision": self.accelerator.mixed_precision,
            "train_tokens": self.state.train_tokens,
            # of this launch's training time, how much went to waiting for micro-batches
            "data_wait_share": round(self.launch_data_wait / max(self.launch_seconds, 1e-9), 4),
            # this launch's speed over its steps alone, saves and evaluations left out
            "train_tokens_per_second": round(self.launch_tokens / max(self.step_seconds, 1e-9), 1),
        }
        if self.peak_tflops:
            results["mfu"] = round(self.model_flops_utilisation(self.launch_flops, self.step_seconds), 4)
            results["peak_tflops"] = self.peak_tflops
        if self.compiled is not None:
            results["compiled_graphs"] = self.compiled.graphs
        if self.accelerator.device.type == "cuda":
            results["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if self.start is not None:
            results["from_model"] = self.start.source
        results["trainable_parameters"] = self.trainable_parameters
        if self.accelerator.is_main_process:
            plain = plain_model(model)  # a LoRA run's adapters merged: a folder that loads like any other
            save_model_folder(plain, self.tokenizer, self.output_dir)
            save_adapter(model, self.output_dir)
            for step in self.after_saving:  # the other rooms' work in the folder (`train --shortlist`)
                try:
                    results.update(step(self))
                except Exception as error:
                    failures.append((step.describe(self), error))
            try:
                for name, dataset in (("validation", self.corpus.validation), ("test", self.corpus.test)):
                    if dataset is not None:
                        results[name] = self.evaluate(dataset, model=plain)
                if self.extra_eval:
                    results["extra_evaluation"] = {
                        name: self.evaluate(dataset, model=plain) for name, dataset in self.extra_eval.items()
                    }
                results["evaluation_sets"] = self.before_and_after(results)
            except Exception as error:
                failures.append(("scoring the final model", error))
            results.update(
                best_validation_bleu=self.state.best_bleu,
                best_step=self.state.best_step,
                train_seconds=round(self.state.train_seconds, 1),
                machine=f"{platform.machine()}, {torch.get_num_threads()} threads, {self.accelerator.device}",
            )
            try:
                examples = validation_examples(self.corpus.validation, self.data_args.source_lang)
                write_results_and_card(plain, results, self.output_dir, self.data_args, self.args, examples)
            except Exception as error:
                failures.append(("writing results.json and the model card", error))
            if self.args.push_to_hub:
                try:
                    push_output_folder(self.output_dir, self.args)
                except Exception as error:
                    retry = f"`vanilla-transformer push {self.output_dir} --repo-id {self.args.hub_repo_id}` retries"
                    failures.append((f"publishing the folder ({retry})", error))
        self.accelerator.wait_for_everyone()
        self.release_ddp_wrapper()
        self.accelerator.end_training()
        if failures:
            described = "; ".join(f"{what} failed: {type(error).__name__}: {error}" for what, error in failures)
            raise RunEndedWithErrors(
                f"training ended at step {self.state.step} and the model is saved in {self.output_dir}, but {described}"
            ) from failures[0][1]
        return results

    def before_and_after(self, results: dict) -> dict:
        """{set: {"before": scores at step 0, "after": the final model's}} of validation and each extra set, where
        the run scored step 0 (it starts from a model, or has extra sets)."""
        start = self.state.history[0] if self.state.history and self.state.history[0]["step"] == 0 else None
        if start is None:
            return {}
        before = {"validation": {k: v for k, v in start.items() if k not in ("step", "sets")}, **start.get("sets", {})}
        after = {"validation": results.get("validation"), **results.get("extra_evaluation", {})}
        return {name: {"before": before[name], "after": after[name]} for name in before if after.get(name)}

    def release_ddp_wrapper(self) -> None:
        """Drop the DDP wrapper while the process group is still registered, before `end_training` destroys it.

        Whoever drops the last reference to a gloo process group runs its destructor, which joins the gloo worker
        threads. DDP's reducer drops its reference holding the GIL, while a worker may still be freeing the tensors
        of the last barrier, which needs the GIL: a process hung at exit that way in CI (py-spy: ~Reducer ->
        ~ProcessGroupGloo -> thread::join). Freed here, the reducer never holds the last reference: the group's
        registry does, and its Python handle releases the GIL when it goes.
        """
        self.model = self.unwrapped
        self.accelerator.free_memory()  # forgets the prepared objects and collects the wrapper's reference cycles


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    train_args: TrainArguments,
    after_saving: Sequence[AfterSaving] = (),
) -> dict:
    return TrainingRun(model_args, data_args, train_args, after_saving=after_saving).run()
