"""The weights of an ONNX export, each stored once, and their int8 form.

torch's exporter writes each graph with its own copy of every weight it reads: the decoder's first and later steps
both hold the decoder, the encoder and the decoder both hold a shared embedding, and a tied generator holds the
embedding a second time, transposed (the exporter folds the transpose of each linear layer's weight into a new
constant). `write_sharing_weights` writes the graphs with ONNX external data pointing into one weights file in
which each tensor is stored once: a tensor equal to one stored already points at it, and a matrix that is the
transpose of one stored already becomes a Transpose node of it (ONNX Runtime folds it back into a constant when it
loads the graph, in memory).

int8 is ONNX Runtime's dynamic quantization of each graph (int8 weights of the matrix products and embeddings,
activations quantized on the fly), before the weights are shared: a tensor quantizes the same way in every graph,
so the int8 tensors are shared the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

# tensors smaller than this stay inside their graph (shapes, scales, biases of small models): a pointer costs more
SHARED_MIN_BYTES = 1024
ALIGNMENT = 64  # each tensor starts on a cache line (and any typed array view of it is aligned)


_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")


def _digest(array: np.ndarray) -> tuple:
    return array.dtype.str, array.shape, hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def write_sharing_weights(graphs: list[Path], output: Path, weights_file: str) -> None:
    """Write each graph file of `graphs` (self-contained ONNX files) into the folder `output` under its own name,
    its large tensors in `output / weights_file`, shared between and within graphs as the module says."""
    import onnx
    from onnx import external_data_helper, helper, numpy_helper

    stored: dict[tuple, tuple[int, int]] = {}  # digest -> (offset, length) in the weights file
    with open(output / weights_file, "wb") as weights:

        def point(tensor, array: np.ndarray) -> None:
            """Make `tensor` hold `array` (its dtype and shape), pointing into the weights file; stored once."""
            key = _digest(array)
            if key not in stored:
                padding = -weights.tell() % ALIGNMENT
                weights.write(b"\0" * padding)
                stored[key] = (weights.tell(), array.nbytes)
                weights.write(np.ascontiguousarray(array).tobytes())
            offset, length = stored[key]
            tensor.dims[:] = array.shape
            tensor.raw_data = b"\0"  # onnx's helper wants a field it then leaves behind: cleared below
            external_data_helper.set_external_data(tensor, weights_file, offset, length)
            for field in _DATA_FIELDS:
                tensor.ClearField(field)
            tensor.data_location = onnx.TensorProto.EXTERNAL

        for path in graphs:
            model = onnx.load(str(path))
            graph = model.graph
            transposes = []
            for tensor in graph.initializer:
                array = numpy_helper.to_array(tensor)
                if array.nbytes < SHARED_MIN_BYTES:
                    continue
                if array.ndim == 2 and _digest(array) not in stored and _digest(array.T) in stored:
                    # the transpose of a stored matrix: read it, transposed by a node
                    source = f"{tensor.name}.transposed"
                    transposes.append(helper.make_node("Transpose", [source], [tensor.name], perm=[1, 0]))
                    tensor.name = source
                    array = array.T
                point(tensor, array)
            for node in reversed(transposes):  # before every node that reads them
                graph.node.insert(0, node)
            for node in graph.node:  # the exporter's notes of where each node came from: ~2 kB a node, unread
                node.ClearField("metadata_props")
                node.ClearField("doc_string")
            onnx.save(model, str(output / path.name))


def quantize_int8(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic int8 quantization of one graph: int8 weights (matrix products and embeddings, one scale
    a tensor), uint8 activations quantized at run time.

    ONNX Runtime's pre-processing comes first: its constant folding turns the transpose of a tied generator's weight
    into a constant, which the quantizer then quantizes as it does every other matrix product's (without it, the
    generator dequantized the whole embedding at every step). An embedding is quantized as the matrix products'
    weights are (int8, symmetric; the quantizer's default for a table is uint8 with a zero point), so that a tied
    generator's int8 weight is the int8 embedding transposed, and is stored once."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = target.with_suffix(".prepared.onnx")
    quant_pre_process(source, prepared, skip_symbolic_shape=True)
    graph = onnx.load(str(prepared), load_external_data=False).graph
    constants = {tensor.name for tensor in graph.initializer}
    tables = {node.input[0] for node in graph.node if node.op_type == "Gather" and node.input[0] in constants}
    overrides = {name: [{"quant_type": QuantType.QInt8, "symmetric": True}] for name in sorted(tables)}
    quantize_dynamic(
        prepared,
        target,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gather"],
        extra_options={"TensorQuantOverrides": overrides},
    )
    prepared.unlink()


__all__ = ["quantize_int8", "write_sharing_weights"]
