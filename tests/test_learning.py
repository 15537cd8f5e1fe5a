"""The model learns, and learns the same way through transformers' Trainer with gradient accumulation."""

import torch
from helpers import BOS, EOS, VOCAB, tiny_config, tiny_model
from transformers import Trainer, TrainingArguments


def reversal_batch(count: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(3, 13, (count, length), generator=generator)
    target = torch.cat([source.flip(1), torch.full((count, 1), EOS)], dim=1)
    return source, target


def test_tiny_model_learns_to_reverse_sequences():
    config = tiny_config(vocab_size=13, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64)
    model = tiny_model(config).train()
    source, target = reversal_batch(16, 5, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, betas=(0.9, 0.98))
    for _ in range(400):
        loss = model(input_ids=source, labels=target).loss
        if loss.item() < 0.02:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    generated = model.generate(input_ids=source, max_new_tokens=6, num_beams=1, do_sample=False)
    assert generated[:, 0].eq(BOS).all()
    exact = (generated[:, 1:7] == target).all(dim=1).float().mean().item()
    assert loss.item() < 0.02, loss.item()
    assert exact >= 0.95, exact


class RaggedDataset(torch.utils.data.Dataset):
    """Eight examples whose targets hold different numbers of real tokens, so per-micro-batch means would differ."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.source = torch.randint(3, VOCAB, (8, 6), generator=generator)
        self.labels = torch.randint(3, VOCAB, (8, 7), generator=generator)
        for row, real_tokens in enumerate((7, 2, 5, 1, 6, 3, 7, 4)):
            self.labels[row, real_tokens:] = -100

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return {"input_ids": self.source[index], "labels": self.labels[index]}


def train_one_step(tmp_path, batch_size: int, accumulation: int) -> dict[str, torch.Tensor]:
    model = tiny_model(tiny_config()).train()
    args = TrainingArguments(
        output_dir=str(tmp_path / f"bs{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=1e9,
        seed=0,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=RaggedDataset())
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.train()
    # with SGD at lr 1 the update is exactly the (negated) gradient
    return {name: initial[name] - p.detach() for name, p in model.named_parameters()}


def test_trainer_gradient_accumulation_matches_one_large_batch(tmp_path):
    dataset = RaggedDataset()
    tokens_per_micro_batch = [(dataset.labels[i : i + 2] != -100).sum().item() for i in range(0, 8, 2)]
    assert len(set(tokens_per_micro_batch)) > 1  # otherwise a plain mean of means would also pass
    accumulated = train_one_step(tmp_path, batch_size=2, accumulation=4)
    single = train_one_step(tmp_path, batch_size=8, accumulation=1)
    assert any(update.abs().max() > 0 for update in single.values())
    for name, update in single.items():
        torch.testing.assert_close(accumulated[name], update, atol=1e-6, rtol=1e-4, msg=name)
