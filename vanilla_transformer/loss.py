"""Label-smoothed cross-entropy (Szegedy et al., 2016), as used by the paper, in one pass over the logits."""

import torch


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
