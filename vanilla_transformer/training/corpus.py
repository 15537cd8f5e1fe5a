"""From a data source to tokenized splits: load, get a tokenizer (given or trained on train), tokenize, filter."""

from dataclasses import dataclass

import datasets
from transformers import PreTrainedTokenizerBase

from ..inference.loading import load_tokenizer
from ..tokenization import train_tokenizer
from .arguments import DataArguments
from .data import filter_by_length, load_parallel


@dataclass
class Corpus:
    tokenizer: PreTrainedTokenizerBase
    train: datasets.Dataset  # columns: input_ids, labels (token ids, EOS appended)
    validation: datasets.Dataset  # columns: source and target language text, input_ids, labels
    test: datasets.Dataset | None


def load_split(args: DataArguments, split: str) -> datasets.Dataset:
    return load_parallel(args.dataset, args.source_lang, args.target_lang, split, name=args.dataset_config)


def obtain_tokenizer(args: DataArguments, train_text: datasets.Dataset) -> PreTrainedTokenizerBase:
    if args.tokenizer:
        return load_tokenizer(args.tokenizer)
    sentences = (sentence for column in (args.source_lang, args.target_lang) for sentence in train_text[column])
    return train_tokenizer(
        sentences, vocab_size=args.vocab_size, lowercase=args.lowercase, split_punctuation=args.split_punctuation
    )


def tokenize(dataset: datasets.Dataset, tokenizer, args: DataArguments, keep_text: bool) -> datasets.Dataset:
    def encode(batch):
        return tokenizer(
            batch[args.source_lang],
            text_target=batch[args.target_lang],
            truncation=True,
            max_length=args.max_source_length,
        )

    # text_target shares max_length with the source; targets get their own limit in the filter below
    removed = [] if keep_text else dataset.column_names
    encoded = dataset.map(encode, batched=True, remove_columns=removed, desc="tokenizing")
    return encoded.remove_columns([c for c in ("attention_mask",) if c in encoded.column_names])


def prepare_corpus(args: DataArguments) -> Corpus:
    # every split is read before a tokenizer is trained, so that a missing or broken one is found out at once
    train_text = load_split(args, args.train_split)
    validation_text = load_split(args, args.validation_split)
    test_text = load_split(args, args.test_split) if args.test_split else None
    tokenizer = obtain_tokenizer(args, train_text)
    train = tokenize(train_text, tokenizer, args, keep_text=False)
    train = filter_by_length(train, max_len=max(args.max_source_length, args.max_target_length))
    validation = tokenize(validation_text, tokenizer, args, keep_text=True)
    test = tokenize(test_text, tokenizer, args, keep_text=True) if test_text is not None else None
    return Corpus(tokenizer=tokenizer, train=train, validation=validation, test=test)
