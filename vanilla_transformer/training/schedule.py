"""The learning-rate schedule: transformers' shapes over `max_steps`, or with a decay that follows the clock.

A schedule counted in steps fits a time budget on one machine only: where steps run faster it ends early and the
rest of the budget is wasted, where they run slower the clock stops the run before the learning rate has come down.
`decay_over="time"` keeps transformers' shapes (linear, cosine) and the warm-up in steps, and moves the decay after
the warm-up by whichever budget is further spent, steps or training time, so the decay ends when the run does.
"""

from dataclasses import dataclass

from torch.optim.lr_scheduler import LambdaLR
from transformers import get_scheduler

from .checkpoints import TrainingState

DECAY_OVER = ("steps", "time")
# the shapes that decay to an end; inverse_sqrt and constant_with_warmup have none for a clock to bring forward
TIME_DECAYING_SCHEDULES = ("linear", "cosine")


@dataclass
class ClockedDecay:
    """Maps an optimizer step to the step at which the step-counted schedule is as far into its decay as the run is.

    Warm-up counts steps. After it, the fraction done is the larger of (step - W) / (max_steps - W) and
    (t - t_W) / (budget - t_W), t being the training seconds so far and t_W those the warm-up took (both kept in
    `state`, so a resumed run goes on from where it stood).
    """

    warmup_steps: int
    max_steps: int
    budget_seconds: float
    state: TrainingState

    def __call__(self, step: int) -> float:
        if step <= self.warmup_steps:
            return step
        decay_steps = self.max_steps - self.warmup_steps
        by_steps = (step - self.warmup_steps) / max(decay_steps, 1)
        decay_seconds = self.budget_seconds - self.state.warmup_seconds
        spent = self.state.train_seconds - self.state.warmup_seconds
        by_time = spent / decay_seconds if decay_seconds > 0 else 1.0
        return self.warmup_steps + decay_steps * min(1.0, max(by_steps, by_time))


def build_scheduler(optimizer, args, state: TrainingState) -> LambdaLR:
    """transformers' `args.lr_scheduler_type` over `args.max_steps`; with `args.decay_over == "time"`, its decay
    follows `state.train_seconds` of `args.max_train_seconds` as well (the arguments have checked that both are set)."""
    scheduler = get_scheduler(
        args.lr_scheduler_type, optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=args.max_steps
    )
    if args.decay_over == "time":
        clocked = ClockedDecay(args.warmup_steps, args.max_steps, args.max_train_seconds, state)
        scheduler.lr_lambdas = [lambda step, shape=shape: shape(clocked(step)) for shape in scheduler.lr_lambdas]
    return scheduler
