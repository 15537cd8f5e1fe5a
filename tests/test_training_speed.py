"""Training at the hardware's speed (issue 52): the generator and the loss in blocks, a step that reads nothing back
from the device, --torch_compile, fused AdamW, and the speed and MFU the loop reports."""

import copy

import pytest
import torch
from helpers import VOCAB, random_tokens, tiny_arguments, tiny_config, tiny_model
from safetensors.torch import load_file
from torch.profiler import ProfilerActivity, profile

from vanilla_transformer.loss import generator_and_label_smoothed_cross_entropy, label_smoothed_cross_entropy
from vanilla_transformer.modeling_vanilla_transformer import check_token_ids
from vanilla_transformer.training import TrainingRun, parse_arguments
from vanilla_transformer.training import compiled_step as compiled_step_module
from vanilla_transformer.training.corpus import prepare_corpus
from vanilla_transformer.training.flops import forward_flops, training_flops

# ---------------------------------------------------------------------------------- the generator and the loss


def unfused_loss(hidden, weight, bias, labels, smoothing, blocks):
    """The path before the blocks: the whole logits, then the loss over them."""
    logits = hidden @ weight.T + (0 if bias is None else bias)
    return label_smoothed_cross_entropy(logits, labels, smoothing)


def blocked_loss(hidden, weight, bias, labels, smoothing, blocks):
    return generator_and_label_smoothed_cross_entropy(hidden, weight, bias, labels, smoothing, blocks=blocks)


def loss_and_gradients(function, hidden, weight, bias, labels, smoothing, blocks):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = function(hidden, weight, bias, labels, smoothing, blocks)
    (2.5 * loss).backward()  # a scaled loss: the backward pass must scale what the forward pass wrote
    return loss.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("blocks", [1, 3, 40])  # 40 blocks of 23 tokens: most blocks are padding
def test_the_generator_and_loss_in_blocks_give_the_unfused_loss_and_gradients_in_float64(smoothing, with_bias, blocks):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(23, 8, dtype=torch.float64, generator=generator)
    weight = torch.randn(VOCAB, 8, dtype=torch.float64, generator=generator)
    bias = torch.randn(VOCAB, dtype=torch.float64, generator=generator) if with_bias else None
    labels = torch.randint(0, VOCAB, (23,), generator=generator)
    labels[[2, 7, 8]] = -100
    expected = loss_and_gradients(unfused_loss, hidden, weight, bias, labels, smoothing, blocks)
    actual = loss_and_gradients(blocked_loss, hidden, weight, bias, labels, smoothing, blocks)
    for name, want, got in zip(("loss", "d(hidden)", "d(weight)"), expected, actual, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=name)
    # ignored tokens take no gradient
    assert torch.equal(actual[1][[2, 7, 8]], torch.zeros(3, 8, dtype=torch.float64))


def model_loss_and_gradients(config, **inputs):
    model = tiny_model(config).train()
    outputs = model(**inputs)
    outputs.loss.backward()
    return outputs, {name: parameter.grad for name, parameter in model.named_parameters()}


@pytest.mark.parametrize(
    "switches",
    [dict(), dict(final_logits_bias=True, decoder_vocab_size=VOCAB + 5, share_encoder_decoder_embeddings=False)],
    ids=["tied", "marian-bias-separate-target"],
)
def test_a_training_forward_in_blocks_gives_the_unfused_loss_and_gradients_of_every_weight(switches):
    source, labels = random_tokens(3, 7, seed=0), random_tokens(3, 40, seed=1)
    labels[1, 30:] = -100
    config = tiny_config(label_smoothing=0.1, loss_blocks=4, **switches)
    fused, fused_gradients = model_loss_and_gradients(copy.deepcopy(config), input_ids=source, labels=labels)
    config.loss_blocks = 0
    unfused, unfused_gradients = model_loss_and_gradients(config, input_ids=source, labels=labels)
    assert fused.logits is None and unfused.logits is not None  # in training the logits are not returned
    torch.testing.assert_close(fused.loss, unfused.loss)
    assert fused_gradients.keys() == unfused_gradients.keys()
    for name, gradient in unfused_gradients.items():
        torch.testing.assert_close(fused_gradients[name], gradient, msg=name)


def test_under_bf16_autocast_the_blocks_stay_within_bf16_of_the_unfused_loss():
    source, labels = random_tokens(4, 9, seed=0), random_tokens(4, 40, seed=1)
    results = {}
    for blocks in (0, 4):
        config = tiny_config(label_smoothing=0.1, loss_blocks=blocks)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[blocks] = model_loss_and_gradients(config, input_ids=source, labels=labels)
    (unfused, unfused_gradients), (fused, fused_gradients) = results[0], results[4]
    torch.testing.assert_close(fused.loss, unfused.loss, rtol=1e-2, atol=1e-2)
    for name, gradient in unfused_gradients.items():
        torch.testing.assert_close(fused_gradients[name], gradient, rtol=5e-2, atol=2e-3, msg=name)


def test_logits_come_back_when_asked_and_in_evaluation():
    model = tiny_model(tiny_config(loss_blocks=2))
    source, labels = random_tokens(2, 5, seed=0), random_tokens(2, 6, seed=1)
    model.train()
    trained = model(input_ids=source, labels=labels)
    asked = model(input_ids=source, labels=labels, return_logits=True)
    assert trained.logits is None and asked.logits.shape == (2, 6, VOCAB)
    model.eval()
    evaluated = model(input_ids=source, labels=labels)
    told = model(input_ids=source, labels=labels, return_logits=False)
    assert evaluated.logits.shape == (2, 6, VOCAB) and told.logits is None
    loss, logits = model(input_ids=source, labels=labels, return_dict=False)[:2]
    for other in (asked.loss, evaluated.loss, told.loss, loss):
        torch.testing.assert_close(other, trained.loss)
    assert logits.shape == (2, 6, VOCAB)


# ---------------------------------------------------------------------------------- nothing read back in a step

SYNCHRONISING_OPS = ("aten::item", "aten::_local_scalar_dense")
# AdamW's fused CPU kernel reads each parameter's step count, a CPU scalar, with `item()`: on the CPU there is no
# device to wait for, and on a GPU the fused kernel takes its step counts on the device and reads none
OWN_SCALARS = ("aten::_fused_adamw_",)


class StopAfter:
    """The loop's interrupt: stops it once the run reached `steps`."""

    def __init__(self, run: TrainingRun, steps: int):
        self.run, self.steps = run, steps

    @property
    def requested(self) -> bool:
        return self.run.state.step >= self.steps


def called_from(event, names: tuple[str, ...]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def synchronising_ops_of_steps(run: TrainingRun, steps: int) -> tuple[int, int]:
    """How many synchronising ops the loop ran for its next `steps` steps, profiled on the CPU: (outside fused AdamW's
    CPU kernel, inside it)."""
    progress = run.progress_bar()
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        run.train_until_done(progress, 0.0, run.clock(), StopAfter(run, run.state.step + steps))
    # aten::item calls aten::_local_scalar_dense: the outer one of each pair counts
    reads = [event for event in profiled.events() if event.name == "aten::_local_scalar_dense"]
    optimizer_own = sum(called_from(event, OWN_SCALARS) for event in reads)
    return len(reads) - optimizer_own, optimizer_own


def reset_accelerator_state():
    """For a run in bf16 after one in float32 in one process: accelerate keeps one state a process."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    reset_accelerator_state()
    yield
    reset_accelerator_state()


@pytest.mark.parametrize(
    "options",
    [dict(), dict(max_train_minutes=10.0, mixed_precision="bf16", gradient_accumulation_steps=2)],
    ids=["plain", "time-budget-bf16-accumulation"],
)
def test_a_training_step_reads_nothing_back_from_the_device_but_at_logging_steps(corpus_folder, tmp_path, options):
    arguments = tiny_arguments(corpus_folder, tmp_path, max_steps=20, save_steps=0, logging_steps=10, **options)
    run = TrainingRun(*arguments)
    run.model.train()
    run.start_micro_batches()
    outside, inside_adamw = synchronising_ops_of_steps(run, 3)
    assert outside == 0  # the id checks, masks, loss, clipping, the rest of AdamW and the clock
    assert inside_adamw > 0  # the profile sees ops inside the optimizer, so the zero above is not blind to them
    run.args.logging_steps = 1  # a logging step reads the loss (so the count above is not blind)
    assert synchronising_ops_of_steps(run, 1)[0] > 0
    assert run.optimizer.optimizer.defaults["fused"]  # AdamW's fused kernel, which the CPU has


def test_ids_on_a_device_are_not_read_back_and_on_the_cpu_they_are_checked():
    on_a_device = torch.full((2, 3), VOCAB + 7, dtype=torch.long, device="meta")  # no values to read
    check_token_ids(on_a_device, VOCAB, "input_ids")
    with pytest.raises(ValueError, match=rf"input_ids contains id {VOCAB + 7}, outside the vocabulary"):
        check_token_ids(torch.full((2, 3), VOCAB + 7), VOCAB, "input_ids")
    labels = torch.tensor([[3, -100], [4, -100]])
    check_token_ids(labels, VOCAB, "labels", ignore_index=-100)


# ------------------------------------------------------------------------------------------------ --torch_compile


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo's caches emptied: after enough compilations of the model's forward in one test process it stops
    compiling it (its recompilation limit) and runs it eager, which would leave a test of compiling nothing to see."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def final_parameters(run: TrainingRun) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in run.unwrapped.named_parameters()}


def test_thirty_compiled_steps_end_where_thirty_eager_steps_do(corpus_folder, tmp_path):
    """Inductor, dynamic shapes: the numbers corpus's token-budget batches change shape every step, two micro-batches
    a step; dropout off, so that both runs compute the same function."""
    corpus = prepare_corpus(tiny_arguments(corpus_folder, tmp_path)[1])
    starts, ends, results = {}, {}, {}
    for compiled in (False, True):
        model_args, data_args, train_args = tiny_arguments(
            corpus_folder, tmp_path / str(compiled), max_steps=30, save_steps=0, max_tokens=160,
            gradient_accumulation_steps=2, learning_rate=1e-3, logging_steps=10, torch_compile=compiled,
        )  # fmt: skip
        model_args.dropout = 0.0
        run = TrainingRun(model_args, data_args, train_args, corpus=corpus)
        starts[compiled] = final_parameters(run)
        results[compiled] = run.run()
        ends[compiled] = final_parameters(run)
    for name, eager in starts[False].items():
        torch.testing.assert_close(starts[True][name], eager, rtol=0, atol=0, msg=name)
    # what the 30 steps changed, compiled against eager, over every weight: float rounding differs between the two
    # (fused kernels, another order of sums), and AdamW magnifies it in weights of tiny gradients, so no weight is
    # bitwise equal; steps that computed other gradients would end about as far apart as the steps moved (1.0)
    change = sum(float((ends[False][name] - start).pow(2).sum()) for name, start in starts[False].items())
    apart = sum(float((ends[True][name] - eager).pow(2).sum()) for name, eager in ends[False].items())
    assert change > 0 and (apart / change) ** 0.5 < 0.05
    assert results[True]["train_steps"] == results[False]["train_steps"] == 30
    assert 1 <= results[True]["compiled_graphs"] <= 3  # dynamic shapes: not one graph a batch shape
    assert "compiled_graphs" not in results[False]
    assert results[True]["train_tokens_per_second"] > 0 and results[False]["train_tokens_per_second"] > 0


@pytest.fixture
def tracing_only(monkeypatch):
    """torch.compile's tracing (dynamo and AOT autograd, as inductor gets them) without inductor's code generation,
    which takes a minute a graph on a CPU: enough to see a feature's graph capture and its gradients."""

    def init(self):
        self.inductor = torch._dynamo.lookup_backend("aot_eager")
        self.graphs = 0

    monkeypatch.setattr(compiled_step_module.CountingInductor, "__init__", init)


def test_a_compiled_run_resumes_exactly(corpus_folder, tmp_path, tracing_only):
    corpus = prepare_corpus(tiny_arguments(corpus_folder, tmp_path)[1])
    TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "straight", torch_compile=True), corpus=corpus).run()
    TrainingRun(
        *tiny_arguments(corpus_folder, tmp_path / "split", max_steps=2, torch_compile=True), corpus=corpus
    ).run()
    resumed = TrainingRun(
        *tiny_arguments(corpus_folder, tmp_path / "split", resume_from_checkpoint="latest", torch_compile=True),
        corpus=corpus,
    )
    assert resumed.run()["train_steps"] == 4
    straight = load_file(tmp_path / "straight" / "model.safetensors")
    split = load_file(tmp_path / "split" / "model.safetensors")
    for name, tensor in straight.items():
        assert torch.equal(split[name], tensor), name


@pytest.mark.parametrize(
    "how", [["--lora_r", "2", "--mixed_precision", "bf16"], ["--freeze", "encoder"]], ids=["lora-bf16", "freeze"]
)
def test_a_compiled_run_from_a_model_trains_what_it_is_told(corpus_folder, tmp_path, tracing_only, how):
    if "--lora_r" in how:
        pytest.importorskip("peft")
    start = tmp_path / "start"
    TrainingRun(*tiny_arguments(corpus_folder, start)).run()
    reset_accelerator_state()
    flags = [
        "--from_model", str(start), "--dataset", str(corpus_folder), "--validation_split", "validation",
        "--test_split", "test", "--max_eval_samples", "4", "--output_dir", str(tmp_path / "fine"), "--max_steps", "3",
        "--max_tokens", "256", "--warmup_steps", "1", "--learning_rate", "1e-2", "--save_steps", "0",
        "--eval_steps", "0", "--num_beams", "1", "--max_new_tokens", "4", "--report_to", "none",
        "--disable_progress_bar", "--torch_compile", *how,
    ]  # fmt: skip
    run = TrainingRun(*parse_arguments(flags))
    before = {name: parameter.detach().clone() for name, parameter in run.unwrapped.named_parameters()}
    results = run.run()
    assert results["compiled_graphs"] >= 1 and results["train_steps"] == 3
    after = dict(run.unwrapped.named_parameters())
    changed = {name for name, tensor in before.items() if not torch.equal(after[name].detach(), tensor)}
    if "--freeze" in how:
        assert changed and not any(name.startswith("model.encoder.layers") for name in changed)
    else:
        assert changed and all("lora_" in name for name in changed)


# ------------------------------------------------------------------------------------------------------- FLOPs


def test_model_flops_are_the_papers_count_for_the_base_model():
    config = copy.deepcopy(tiny_config(vocab_size=37000, d_model=512, encoder_layers=6, decoder_layers=6,
                                       encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                                       decoder_ffn_dim=2048))  # fmt: skip
    d, f, layers, vocab, source, target = 512, 2048, 6, 37000, 27, 29
    paper = (
        2 * source * layers * (4 * d * d + 2 * d * f)  # encoder: q, k, v, o and the feed-forward network
        + 2 * target * layers * (6 * d * d + 2 * d * f)  # decoder: self-attention, cross-attention's q and o, FFN
        + 2 * source * layers * 2 * d * d  # cross-attention's k and v of the source
        + 2 * target * d * vocab  # the generator
        + 4 * layers * d * (source**2 + target**2 + target * source)  # attention's scores and weighted values
    )
    assert forward_flops(config, source, target) == paper
    assert training_flops(config, [source, 10], [target, 12]) == 3 * (paper + forward_flops(config, 10, 12))
