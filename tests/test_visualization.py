"""Pictures of attention, positions and masks: the files are real images, the numbers drawn are the model's."""

import argparse
import itertools
import sys
import xml.etree.ElementTree as ElementTree

import matplotlib.image
import numpy as np
import pytest
import torch
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
)

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.modeling_vanilla_transformer import local_window
from vanilla_transformer.positions import inverse_frequencies
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.visualization import (
    add_plot_subcommand,
    alibi_bias_plot,
    attention_masks,
    cross_attention_alignment,
    generation_cross_attentions,
    learned_position_plot,
    mask_plots,
    positional_encoding_plots,
    rotary_distance_plot,
    self_attention_heatmaps,
)

SUBJECTS = ("the cat", "a dog", "my friend", "the old man", "her sister")
VERBS = ("sees", "likes", "finds", "paints", "calls")
OBJECTS = ("the house", "a red car", "the river")
SENTENCES = [f"{s} {v} {o} ." for s, v, o in itertools.product(SUBJECTS, VERBS, OBJECTS)][:50]
TEXT = "the cat sees a red car ."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES, vocab_size=300)


def tiny(tokenizer, seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        **overrides,
    )
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny(tokenizer)


def tokens_of(tokenizer, text: str) -> list[str]:
    return tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])


def tick_texts(labels) -> list[str]:
    return [label.get_text() for label in labels]


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200 and pixels.std() > 0.01


def svg_text(path) -> str:
    root = ElementTree.parse(path).getroot()
    assert root.tag.endswith("svg")
    return "".join(root.itertext())


def assert_distributions(weights):
    weights = torch.as_tensor(np.asarray(weights))
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5, rtol=0)


def teacher_forced(model, tokenizer, text, decoder_input_ids):
    encoded = tokenizer(text, return_tensors="pt")
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(**encoded, decoder_input_ids=decoder_input_ids, output_attentions=True)
    finally:
        model.set_attn_implementation("sdpa")


# ---- cross-attention alignment -------------------------------------------------------------------------------


def test_alignment_png_shows_source_by_generated_tokens_and_restores_the_model(model, tokenizer, tmp_path):
    assert model.config._attn_implementation == "sdpa"
    result = cross_attention_alignment(model, tokenizer, TEXT, tmp_path / "alignment.png", max_new_tokens=6)

    assert_png(tmp_path / "alignment.png")
    assert result.source_tokens == tokens_of(tokenizer, TEXT)
    assert 1 <= len(result.target_tokens) <= 6
    assert result.weights.shape == (len(result.target_tokens), len(result.source_tokens))
    assert_distributions(result.weights)
    (axis,) = result.axes
    assert tick_texts(axis.get_xticklabels()) == result.source_tokens
    assert tick_texts(axis.get_yticklabels()) == result.target_tokens
    assert axis.get_xlabel() == "source tokens" and axis.get_ylabel() == "generated tokens"
    assert TEXT in result.figure.get_suptitle()
    np.testing.assert_array_equal(axis.images[0].get_array(), result.weights)
    # switched to eager and eval for the call only
    assert model.config._attn_implementation == "sdpa" and not model.training


@pytest.mark.parametrize(("num_beams", "layer", "head"), [(1, None, None), (3, 1, 0)])
def test_alignment_rows_are_the_decoder_steps_that_chose_each_token(model, tokenizer, tmp_path, num_beams, layer, head):
    result = cross_attention_alignment(
        model,
        tokenizer,
        TEXT,
        tmp_path / "alignment.svg",
        layer=layer,
        head=head,
        num_beams=num_beams,
        max_new_tokens=6,
    )
    generated = tokenizer.convert_tokens_to_ids(result.target_tokens)
    # the same weights from one teacher-forced pass over the returned sequence: row t = the query fed at step t
    decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, *generated[:-1]]])
    reference = torch.stack(teacher_forced(model, tokenizer, TEXT, decoder_input_ids).cross_attentions)[:, 0]
    expected = reference.mean((0, 1)) if layer is None else reference[layer, head]
    np.testing.assert_allclose(result.weights, expected.numpy(), atol=1e-5)

    text = svg_text(tmp_path / "alignment.svg")
    assert all(token in text for token in result.source_tokens)
    assert ("mean of 2 layers x 2 heads" if layer is None else "layer 1, head 0, beam search (3 beams)") in text


@pytest.mark.parametrize("num_beams", [1, 2])
def test_generation_cross_attentions_are_distributions_with_padding_at_zero(model, tokenizer, num_beams):
    encoded = tokenizer(["a dog .", TEXT], padding=True, return_tensors="pt")
    sequences, attentions = generation_cross_attentions(
        model, encoded["input_ids"], encoded["attention_mask"], num_beams=num_beams, max_new_tokens=5
    )
    assert len(attentions) == 2 and sequences.shape[0] == 2
    short = int(encoded["attention_mask"][0].sum())
    assert short < encoded["input_ids"].shape[1]
    for weights in attentions:
        assert weights.shape[:2] == (2, 2) and weights.shape[-1] == encoded["input_ids"].shape[1]
        assert_distributions(weights)
    assert (attentions[0][..., short:] == 0).all()


def test_alignment_refuses_a_layer_or_head_that_does_not_exist(model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match=r"layer 2 does not exist: there are 2"):
        cross_attention_alignment(model, tokenizer, TEXT, tmp_path / "a.png", layer=2, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"head -3 does not exist"):
        cross_attention_alignment(model, tokenizer, TEXT, tmp_path / "a.png", head=-3, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"end the output path in one of \.png, \.svg"):
        cross_attention_alignment(model, tokenizer, TEXT, tmp_path / "a.jpg", max_new_tokens=2)
    assert model.config._attn_implementation == "sdpa"


# ---- per-head attention maps -----------------------------------------------------------------------------------


def test_encoder_heatmaps_one_panel_per_head_labelled_with_source_tokens(model, tokenizer, tmp_path):
    result = self_attention_heatmaps(model, tokenizer, TEXT, tmp_path / "encoder.png", stack="encoder", layer=-1)
    assert_png(tmp_path / "encoder.png")
    source = tokens_of(tokenizer, TEXT)
    assert result.layer == 1 and result.heads == [0, 1]
    assert result.weights.shape == (2, len(source), len(source))
    assert_distributions(result.weights)
    assert len(result.axes) == 2
    for head, axis in enumerate(result.axes):
        assert axis.get_title() == f"head {head}"
        assert tick_texts(axis.get_xticklabels()) == source and tick_texts(axis.get_yticklabels()) == source
        np.testing.assert_array_equal(axis.images[0].get_array(), result.weights[head])
    reference = teacher_forced(model, tokenizer, TEXT, torch.tensor([[1]])).encoder_attentions[1][0]
    np.testing.assert_allclose(result.weights, reference.numpy(), atol=1e-6)

    single = self_attention_heatmaps(model, tokenizer, TEXT, tmp_path / "head.svg", layer=0, head=1)
    assert single.heads == [1] and len(single.axes) == 1 and single.weights.shape[0] == 1
    svg_text(tmp_path / "head.svg")


def test_decoder_heatmaps_read_the_target_shifted_right_and_are_causal(model, tokenizer, tmp_path):
    target = "a dog likes the river ."
    result = self_attention_heatmaps(
        model, tokenizer, TEXT, tmp_path / "decoder.png", target_text=target, stack="decoder", layer=0
    )
    assert_png(tmp_path / "decoder.png")
    fed = ["<s>", *tokens_of(tokenizer, target)[:-1]]
    assert result.query_tokens == fed and result.key_tokens == fed
    assert tick_texts(result.axes[0].get_yticklabels()) == fed
    assert_distributions(result.weights)
    future = torch.ones(len(fed), len(fed)).triu(1).bool().numpy()
    assert (result.weights[:, future] == 0).all()

    cross = self_attention_heatmaps(model, tokenizer, TEXT, None, target_text=target, stack="cross")  # no file
    assert cross.path is None and list(tmp_path.iterdir()) == [tmp_path / "decoder.png"]
    assert cross.query_tokens == fed and cross.key_tokens == tokens_of(tokenizer, TEXT)
    assert cross.weights.shape == (2, len(fed), len(cross.key_tokens))
    assert_distributions(cross.weights)


def test_decoder_heatmaps_without_a_target_feed_the_greedy_translation(model, tokenizer):
    result = self_attention_heatmaps(model, tokenizer, TEXT, None, stack="decoder", max_new_tokens=5)
    generated = model.generate(**tokenizer(TEXT, return_tensors="pt"), max_new_tokens=5)[0].tolist()
    if model.config.eos_token_id in generated:
        generated = generated[: generated.index(model.config.eos_token_id) + 1]
    assert result.query_tokens == tokenizer.convert_ids_to_tokens(generated[:-1])


def test_sliding_window_attention_is_zero_outside_the_window(tokenizer):
    model = tiny(tokenizer, sliding_window=2)
    encoder = self_attention_heatmaps(model, tokenizer, TEXT, None, stack="encoder", layer=0)
    decoder = self_attention_heatmaps(
        model, tokenizer, TEXT, None, target_text="a dog likes the river .", stack="decoder"
    )
    for result, allowed in (
        (encoder, lambda q, k: abs(q - k) < 2),
        (decoder, lambda q, k: 0 <= q - k < 2),
    ):
        _, queries, keys = result.weights.shape
        outside = np.array([[not allowed(q, k) for k in range(keys)] for q in range(queries)])
        assert outside.any() and (result.weights[:, outside] == 0).all()
        assert (result.weights[:, ~outside] > 0).all()
        assert_distributions(result.weights)


def test_unknown_stack_is_refused(model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match=r"stack must be one of encoder, decoder, cross, got 'middle'"):
        self_attention_heatmaps(model, tokenizer, TEXT, tmp_path / "x.png", stack="middle")


# ---- positions -------------------------------------------------------------------------------------------------


def test_sinusoidal_plot_draws_the_papers_formula(tmp_path):
    d_model, length, dims = 32, 50, (0, 1, 6, 17)
    result = positional_encoding_plots(tmp_path / "sin.png", d_model=d_model, length=length, dims=dims)
    assert_png(tmp_path / "sin.png")
    table = result.encodings["sinusoidal"]
    assert table.shape == (length, d_model)
    positions = np.arange(length)[:, None]
    i = np.arange(d_model // 2)[None, :]
    angles = positions / 10000 ** (2 * i / d_model)
    np.testing.assert_allclose(table[:, 0::2], np.sin(angles), atol=1e-5)
    np.testing.assert_allclose(table[:, 1::2], np.cos(angles), atol=1e-5)
    curves, heatmap = result.axes
    assert len(curves.get_lines()) == len(dims)
    for line, dim in zip(curves.get_lines(), dims, strict=True):
        np.testing.assert_array_equal(line.get_ydata(), table[:, dim])
        assert line.get_label().startswith(f"dim {dim}: {'sin' if dim % 2 == 0 else 'cos'}")
    np.testing.assert_array_equal(heatmap.images[0].get_array(), table)
    with pytest.raises(ValueError, match=r"dims must be between 0 and d_model - 1 = 31"):
        positional_encoding_plots(tmp_path / "bad.png", d_model=d_model, dims=(32,))


def test_learned_position_plot_shows_each_stacks_table(tokenizer, tmp_path):
    model = tiny(tokenizer, position_embedding_type="learned", max_position_embeddings=40)
    result = learned_position_plot(model, tmp_path / "learned.svg", max_positions=30)
    svg_text(tmp_path / "learned.svg")
    assert set(result.encodings) == {"encoder", "decoder"}
    np.testing.assert_array_equal(
        result.encodings["encoder"], model.model.encoder.embeddings.positions.weight[:30].detach().numpy()
    )
    assert len(result.axes) == 4
    similarity = result.axes[1].images[0].get_array()
    assert similarity.shape == (30, 30)
    np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match=r"position_embedding_type is 'sinusoidal', not 'learned'"):
        learned_position_plot(tiny(tokenizer), None)


def test_rotary_plot_gives_the_mean_cosine_of_the_rotation_angles(tmp_path):
    head_dim, theta, max_distance = 16, 100.0, 64
    result = rotary_distance_plot(tmp_path / "rope.png", head_dim=head_dim, theta=theta, max_distance=max_distance)
    assert_png(tmp_path / "rope.png")
    np.testing.assert_array_equal(result.distances, np.arange(max_distance + 1))
    # all-ones q = k: q.R(d)k / q.k = mean over the head_dim/2 pairs of cos(d theta_i)
    frequencies = inverse_frequencies(head_dim, theta).double().numpy()
    expected = np.cos(result.distances[:, None] * frequencies[None, :]).mean(-1)
    np.testing.assert_allclose(result.scores["all-ones"], expected, atol=1e-6)
    assert result.scores["random"][0] == pytest.approx(1.0) and result.scores["random std"][0] == pytest.approx(0)
    assert result.scores["all-ones"][1:].max() < 1.0
    np.testing.assert_allclose(result.axes[0].get_lines()[0].get_ydata(), result.scores["all-ones"])


# ---- masks -----------------------------------------------------------------------------------------------------


def test_mask_plots_draw_the_expected_patterns(tmp_path):
    attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    result = mask_plots(tmp_path / "masks.png", attention_mask, sliding_window=2)
    assert_png(tmp_path / "masks.png")
    expected = {
        "padding": [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]],
        "causal": [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]],
        "sliding_window_encoder": [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 1, 0]],
        "sliding_window_decoder": [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0]],
    }
    assert list(result.masks) == list(expected)
    for name, pattern in expected.items():
        np.testing.assert_array_equal(result.masks[name][0], np.array(pattern, dtype=bool))
    np.testing.assert_array_equal(result.masks["padding"][1], np.ones((4, 4), dtype=bool))
    np.testing.assert_array_equal(result.masks["causal"][1], np.tril(np.ones((4, 4), dtype=bool)))
    # one row of panels per sentence, each drawing its mask
    assert len(result.axes) == 8
    for index, (row, name) in enumerate(itertools.product(range(2), expected)):
        np.testing.assert_array_equal(result.axes[index].images[0].get_array(), result.masks[name][row])
    assert tick_texts(result.axes[0].get_xticklabels()) == ["0", "1", "2", "3"]

    without_window = mask_plots(tmp_path / "masks.svg", attention_mask[:1])
    assert list(without_window.masks) == ["padding", "causal"]
    svg_text(tmp_path / "masks.svg")


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_masks_are_the_ones_the_model_builds(tokenizer, padding_side):
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), d_model=16, sliding_window=3)
    config._attn_implementation = "sdpa"  # boolean masks: True where attention is allowed
    tokenizer.padding_side = padding_side
    try:
        attention_mask = tokenizer(["a dog .", TEXT], padding=True, return_tensors="pt")["attention_mask"]
    finally:
        tokenizer.padding_side = "right"
    embeds = torch.zeros(*attention_mask.shape, 16)
    common = dict(config=config, inputs_embeds=embeds, attention_mask=attention_mask)
    model_masks = {
        "padding": create_bidirectional_mask(**common, allow_is_bidirectional_skip=False),
        "causal": create_causal_mask(**common, cache=None, allow_is_causal_skip=False),
        "sliding_window_encoder": create_bidirectional_mask(
            **common, and_mask_function=local_window(3), allow_is_bidirectional_skip=False
        ),
        "sliding_window_decoder": create_sliding_window_causal_mask(**common, cache=None, allow_is_causal_skip=False),
    }
    ours = attention_masks(attention_mask, sliding_window=3)
    for name, mask in model_masks.items():
        np.testing.assert_array_equal(ours[name], mask[:, 0].numpy(), err_msg=name)


def test_mask_plots_label_the_axes_with_tokens(tokenizer):
    encoded = tokenizer(["a dog .", TEXT], padding=True)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded["input_ids"]]
    result = mask_plots(None, encoded["attention_mask"], tokens=tokens)
    assert tick_texts(result.axes[0].get_xticklabels()) == tokens[0]
    assert tick_texts(result.axes[2].get_yticklabels()) == tokens[1]
    assert "<pad>" in tokens[0]
    with pytest.raises(ValueError, match=r"tokens must hold 2 lists"):
        mask_plots(None, encoded["attention_mask"], tokens=tokens[:1])


# ---- html, missing matplotlib, command line --------------------------------------------------------------------


def test_html_output_is_an_interactive_heatmap(model, tokenizer, tmp_path):
    pytest.importorskip("plotly")
    result = cross_attention_alignment(model, tokenizer, TEXT, tmp_path / "alignment.html", max_new_tokens=4)
    page = (tmp_path / "alignment.html").read_text(encoding="utf-8")
    assert "<html>" in page[:100] and '"type":"heatmap"' in page
    assert "Cross-attention alignment" in page
    assert result.figure is not None and not (tmp_path / "alignment.png").exists()


def test_drawing_without_matplotlib_or_plotly_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'pip install "vanilla-transformer\[plot\]"'):
        mask_plots(tmp_path / "m.png", [[1, 1, 0]])
    monkeypatch.setitem(sys.modules, "plotly", None)
    with pytest.raises(ImportError, match=r"An \.html output needs plotly \(pip install plotly\)"):
        mask_plots(tmp_path / "m.html", [[1, 1, 0]])


def run_cli(*argv) -> int:
    parser = argparse.ArgumentParser()
    add_plot_subcommand(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plot", *argv])
    return args.func(args)


def test_alibi_plot_draws_each_heads_penalty_and_where_it_looks(tmp_path):
    result = alibi_bias_plot(tmp_path / "alibi.png", heads=4, max_distance=10)
    assert_png(tmp_path / "alibi.png")
    slopes = np.array([2**-2, 2**-4, 2**-6, 2**-8])
    np.testing.assert_allclose(result.biases, -slopes[:, None] * np.arange(11)[None, :])
    np.testing.assert_allclose(result.attention.sum(-1), 1.0)
    # the steepest head looks mostly at the newest key, the flattest almost evenly
    assert result.attention[0, 0] > 0.2 and result.attention[-1].max() - result.attention[-1].min() < 0.01
    assert len(result.axes) == 2 and len(result.axes[0].get_lines()) == 4


def test_plot_subcommand_draws_every_kind(model, tokenizer, tmp_path, capsys):
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "out"
    model_text = ["--model", str(folder), "--text", TEXT]
    commands = {
        "a.png": ["alignment", *model_text, "--layer", "1", "--head", "0", "--max-new-tokens", "4"],
        "d.svg": ["attention", *model_text, "--target", "a dog .", "--stack", "decoder", "--layer", "0"],
        "p.png": ["positions", "--d-model", "32", "--length", "40", "--dims", "0", "5"],
        "r.png": ["positions", "--kind", "rope", "--head-dim", "8", "--theta", "100", "--max-distance", "32"],
        "b.png": ["positions", "--kind", "alibi", "--heads", "4", "--max-distance", "16"],
        "m.png": ["masks", "--lengths", "3", "--sliding-window", "2"],
        "t.png": ["masks", "--model", str(folder), "--text", "a dog .", "--text", TEXT],
    }
    for name, argv in commands.items():
        assert run_cli(*argv, "--output", str(out / name)) == 0
        assert f"wrote {out / name}" in capsys.readouterr().out
        if name.endswith(".png"):
            assert_png(out / name)
    assert all(token in svg_text(out / "d.svg") for token in tokens_of(tokenizer, "a dog .")[:-1])
    with pytest.raises(SystemExit):
        run_cli("alignment", "--text", TEXT, "--output", str(out / "x.png"))  # --model is required
