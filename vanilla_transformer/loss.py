"""Label-smoothed cross-entropy (Szegedy et al., 2016), as used by the paper: over given logits in one pass, or
together with the generator that makes the logits, a block of tokens at a time."""

import torch
from torch import nn


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Summed loss of (1 - eps) * NLL(target) + eps * mean over the vocabulary of -log p.

    Why not `F.cross_entropy(label_smoothing=...)`: its backward goes through log_softmax, NLL and the smoothing
    sum as separate passes over the (tokens x vocabulary) matrix, which made the loss 20% of a training step on
    the CPU. The gradient, softmax(z) - (1 - eps) * onehot - eps / V, is written here into the log-probabilities'
    buffer during the forward pass, so the backward pass only scales it.
    """

    @staticmethod
    def forward(ctx, logits, labels, smoothing: float, ignore_index: int):
        valid = labels != ignore_index
        targets = labels.masked_fill(~valid, 0).unsqueeze(-1)
        log_probs = torch.log_softmax(logits, dim=-1)
        vocab_size = logits.shape[-1]
        per_token = -(1.0 - smoothing) * log_probs.gather(-1, targets).squeeze(-1)
        if smoothing:
            per_token = per_token - smoothing / vocab_size * log_probs.sum(-1)
        loss = per_token.masked_fill(~valid, 0.0).sum()
        if ctx.needs_input_grad[0]:
            grad = log_probs.exp_()
            if smoothing:
                grad.sub_(smoothing / vocab_size)
            grad.scatter_add_(-1, targets, torch.full_like(targets, smoothing - 1.0, dtype=grad.dtype))
            # ignored tokens get no gradient: their rows are zeroed with the scaling in backward
            ctx.save_for_backward(grad, valid.unsqueeze(-1).to(grad.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad, valid = ctx.saved_tensors
        return grad.mul_(valid * grad_loss), None, None, None


def label_smoothed_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, smoothing: float = 0.0, ignore_index: int = -100
) -> torch.Tensor:
    """Summed over the tokens whose label is not `ignore_index`; equals F.cross_entropy(reduction="sum")."""
    return _LabelSmoothedCrossEntropy.apply(logits, labels, smoothing, ignore_index)


def _compute_dtype(like: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matrix product in here, else the tensor's own."""
    device = like.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return like.dtype


class _GeneratorAndLoss(torch.autograd.Function):
    """Summed label-smoothed loss of the logits z = hidden @ weight^T + bias, and its gradients, computed in `blocks`
    blocks of the tokens: a block's logits are made, turned into its loss and its gradients (its rows of d(hidden),
    its share of d(weight)), and dropped before the next block's logits exist.

    Why: the whole (tokens x vocabulary) logits in float32 are 1.85 GB at 12,500 tokens x 37,000, and the unfused
    path holds several such tensors at once (the logits, their float32 copy, the log-probabilities turned gradient).
    Here one block of logits is the largest tensor, and the backward pass only scales what the forward pass wrote.

    The gradient of the logits, softmax(z) - (1 - eps) * onehot(y) - eps / V, is never written out: the block holds
    exp(z - max z) once, the matrix products take it as it is, and the rest is applied to their small results
    (each row's 1 / sum exp, the target's row of `weight`, the constant eps / V through the sums of `weight` and of
    `hidden`), so a block of logits is read and written a few times instead of a dozen. The matrix products run in
    autocast's dtype when autocast is on, as `nn.Linear` would; sums, the loss and d(weight) are float32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, smoothing: float, ignore_index: int, blocks: int):
        # hidden (tokens, d_model), weight (vocabulary, d_model), bias (vocabulary,) or None, labels (tokens,)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        compute_dtype = _compute_dtype(hidden)
        exact_dtype = torch.promote_types(compute_dtype, torch.float32)  # float32, or float64 for a float64 model
        vocab_size = weight.shape[0]
        spread = smoothing / vocab_size  # what label smoothing gives every token of the vocabulary
        with torch.autocast(hidden.device.type, enabled=False):
            hidden_exact = hidden.to(exact_dtype)
            hidden_c, weight_c = hidden.to(compute_dtype), weight.to(compute_dtype)
            bias_c = None if bias is None else bias.to(compute_dtype)
            # sum over the vocabulary of a token's logits, h . sum(w) + sum(b), which smoothing's term needs
            weight_sum = weight.sum(0, dtype=exact_dtype)
            bias_sum = 0.0 if bias is None else bias.to(exact_dtype).sum()
            loss = torch.zeros((), dtype=exact_dtype, device=hidden.device)
            grad_hidden_blocks = []
            grad_weight = torch.zeros_like(weight, dtype=exact_dtype) if want_weight else None
            valid_hidden_sum = torch.zeros_like(weight_sum)
            # `blocks` blocks of ceil(tokens / blocks) rows, the last ones padded with ignored tokens: one structure
            # for every token count, which a graph compiled with dynamic shapes keeps without a guard on the count
            tokens = hidden.shape[0]
            rows = -(-tokens // blocks)
            padding = rows * blocks - tokens
            pieces = zip(
                nn.functional.pad(hidden_c, (0, 0, 0, padding)).view(blocks, rows, -1).unbind(),
                nn.functional.pad(hidden_exact, (0, 0, 0, padding)).view(blocks, rows, -1).unbind(),
                nn.functional.pad(labels, (0, padding), value=ignore_index).view(blocks, rows).unbind(),
                strict=True,
            )
            for block, block_exact, block_labels in pieces:
                logits = block @ weight_c.T
                if bias_c is not None:
                    logits = logits + bias_c
                logits = logits.to(exact_dtype)
                valid = block_labels != ignore_index
                targets = block_labels.masked_fill(~valid, 0)
                # -log p(v) = log sum(exp z) - z_v: (1 - eps) of it at the target, eps / V of it at every token
                maxima = logits.amax(dim=-1)
                per_token = maxima - (1.0 - smoothing) * logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
                if smoothing:
                    per_token = per_token - spread * (block_exact @ weight_sum + bias_sum)
                exps = logits.sub_(maxima.unsqueeze(-1)).exp_()  # in place: the block's only large tensor
                normalizer = exps.sum(dim=-1)
                per_token = per_token + normalizer.log()
                loss = loss + per_token.masked_fill(~valid, 0.0).sum()
                if not (want_hidden or want_weight):
                    continue
                # softmax = exps / normalizer, row by row; ignored tokens get a zero row
                row_scale = (valid / normalizer).unsqueeze(-1)
                exps = exps.to(compute_dtype)
                valid_rows = valid.unsqueeze(-1).to(exact_dtype)
                if want_hidden:
                    # d(hidden) = softmax @ W - (1 - eps) * W[y] - eps / V * sum(W)
                    grad_block = (exps @ weight_c).to(exact_dtype).mul_(row_scale)
                    target_rows = weight[targets].to(exact_dtype)
                    grad_block -= valid_rows * ((1.0 - smoothing) * target_rows + spread * weight_sum)
                    grad_hidden_blocks.append(grad_block)
                if want_weight:
                    # d(W) = softmax^T @ h - (1 - eps) * onehot(y)^T @ h - eps / V * sum(h) on every row
                    scaled = (block_exact * row_scale).to(compute_dtype)
                    if compute_dtype == exact_dtype:
                        grad_weight.addmm_(exps.T, scaled)
                    else:
                        grad_weight += exps.T @ scaled
                    kept = block_exact * valid_rows
                    grad_weight.index_add_(0, targets, kept, alpha=smoothing - 1.0)
                    valid_hidden_sum += kept.sum(0)
            if want_weight and smoothing:
                grad_weight -= spread * valid_hidden_sum
        grad_hidden = torch.cat(grad_hidden_blocks)[:tokens].to(hidden.dtype) if want_hidden else None
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        # scaled where they lie: d(weight) is as large as the embedding matrix, and this backward runs once
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden.mul_(grad_loss.to(grad_hidden.dtype))
        if grad_weight is not None:
            grad_weight = grad_weight.mul_(grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def generator_and_label_smoothed_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    smoothing: float = 0.0,
    ignore_index: int = -100,
    blocks: int = 8,
) -> torch.Tensor:
    """`label_smoothed_cross_entropy(hidden @ weight.T + bias, labels, ...)` computed in `blocks` blocks of the
    tokens, without the whole logits: `hidden` is (tokens, d_model), `labels` (tokens,); the bias takes no
    gradient (Marian's final_logits_bias is a buffer)."""
    return _GeneratorAndLoss.apply(hidden, weight, bias, labels, smoothing, ignore_index, blocks)
