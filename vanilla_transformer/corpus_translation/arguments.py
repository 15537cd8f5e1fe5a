"""The `vanilla-transformer translate-corpus` arguments, read by HfArgumentParser as train's are: the data flags
have train's names and meanings, so that the corpus written is read by `train` with the same flags."""

from dataclasses import dataclass, field

from ..inference.quantization import QUANTIZATIONS
from ..inference.translate import DTYPES, ENGINES, check_engine, check_onnx_options
from ..training.arguments import check_at_least, check_positive

ROLES = ("train", "validation", "test")


@dataclass
class CorpusTranslationArguments:
    model: str = field(
        metadata={
            "help": "the translating model: one of our folders (a run's output, a folder `convert marian` wrote), a "
            "Hub id of ours, or with --engine ctranslate2 / onnx a folder `export ctranslate2` / `export onnx` wrote"
        }
    )
    output_dir: str = field(metadata={"help": "the corpus folder to write (train --dataset reads it as it is)"})
    dataset: str = field(
        default="bentrevett/multi30k",
        metadata={"help": "a Hub dataset id, a folder of {split}.{lang}[.gz] files, or a jsonl/csv file"},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "the Hub dataset's configuration name"})
    source_lang: str = field(default="en", metadata={"help": "the language translated from"})
    target_lang: str = field(default="de", metadata={"help": "the language the corpus gets translations in"})
    train_split: str = field(default="train", metadata={"help": "empty: none"})
    validation_split: str = field(default="validation", metadata={"help": "empty: none"})
    test_split: str | None = field(default="test", metadata={"help": "empty: none"})
    translate: list[str] = field(
        default_factory=lambda: ["train"],
        metadata={
            "help": "the splits whose source side is translated (train, validation, test); the others are copied "
            "as they are, references included",
            "choices": list(ROLES),
        },
    )
    engine: str = field(
        default="pytorch",
        metadata={
            "help": "pytorch: generate(); ctranslate2: a folder from `export ctranslate2`; onnx: from `export onnx`",
            "choices": ENGINES,
        },
    )
    quantize: str | None = field(
        default=None,
        metadata={"help": "int8 linear layers (PyTorch dynamic quantization, CPU; CTranslate2 compute type int8)"},
    )
    dtype: str | None = field(
        default=None,
        metadata={"help": "float32, bfloat16 or float16; default bfloat16 on a GPU that has it, else the saved one"},
    )
    device: str | None = field(default=None, metadata={"help": "cpu or cuda; default each process's own device"})
    num_beams: int | None = field(default=None, metadata={"help": "default the model's generation config, else 5"})
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "longest translation in tokens; default the generation config's"}
    )
    length_penalty: float | None = field(
        default=None, metadata={"help": "beam scores divided by length ** this; default the generation config's"}
    )
    max_input_tokens: int | None = field(default=None, metadata={"help": "longer sources are cut, with a warning"})
    batch_size: int = field(default=64, metadata={"help": "sentences a generate() call, sorted by length"})
    chunk_sentences: int = field(
        default=10_000,
        metadata={"help": "sentences a chunk: each is written whole or not at all, and a rerun continues after it"},
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "run the model code stored with the model"})
    disable_progress_bar: bool = field(default=False, metadata={"help": "no progress bar"})

    def __post_init__(self):
        check_at_least(self, 1, "num_beams", "max_new_tokens", "max_input_tokens", "batch_size", "chunk_sentences")
        check_positive(self, "length_penalty")
        if self.source_lang == self.target_lang:
            raise ValueError(f"source_lang and target_lang are both {self.source_lang!r}: name two languages")
        for name, value, allowed in (
            ("engine", self.engine, ENGINES),
            ("quantize", self.quantize, (None, *QUANTIZATIONS)),
            ("dtype", self.dtype, (None, *DTYPES)),
            ("device", self.device, (None, "cpu", "cuda")),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(str(v) for v in allowed if v)}")
        unknown = [role for role in self.translate if role not in ROLES]
        if unknown or not self.translate:
            raise ValueError(f"translate={' '.join(self.translate)!r}: name one or more of {', '.join(ROLES)}")
        for role in self.translate:
            if not self.split_names().get(role):
                raise ValueError(f"translate names {role}, but {role}_split is empty: name the split to translate")
        check_engine(self.model, self.engine)
        if self.engine == "onnx":
            check_onnx_options(self.quantize, self.dtype, self.device)
        if self.engine == "ctranslate2" and self.dtype is not None and self.quantize is not None:
            raise ValueError("dtype and quantize both name CTranslate2's compute type: give one")

    def split_names(self) -> dict[str, str]:
        """role -> the split's name in the data, for the splits written (an empty name: none)."""
        names = {"train": self.train_split, "validation": self.validation_split, "test": self.test_split}
        return {role: name for role, name in names.items() if name}

    def generation_settings(self) -> dict:
        """What the output depends on beside the model and the text: a rerun with other settings is refused."""
        return {
            name: getattr(self, name)
            for name in ("num_beams", "max_new_tokens", "length_penalty", "max_input_tokens", "batch_size")
        } | {"chunk_sentences": self.chunk_sentences, "engine": self.engine, "quantize": self.quantize}
