"""Pictures of what the model does: attention alignments and maps, position encodings, masks, and `plot`."""

from .attention import cross_attention_alignment, generation_cross_attentions, self_attention_heatmaps
from .cli import add_plot_subcommand
from .masks import attention_masks, mask_plots
from .positions import alibi_bias_plot, learned_position_plot, positional_encoding_plots, rotary_distance_plot

__all__ = [
    "add_plot_subcommand",
    "alibi_bias_plot",
    "attention_masks",
    "cross_attention_alignment",
    "generation_cross_attentions",
    "learned_position_plot",
    "mask_plots",
    "positional_encoding_plots",
    "rotary_distance_plot",
    "self_attention_heatmaps",
]
