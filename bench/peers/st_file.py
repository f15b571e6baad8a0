"""Writes a safetensors file without the `safetensors` package, for the
PyTorch peers' --save-safetensors (examples/mlp and examples/gpt load it
with --load; docs/examples.md).

The format: an 8-byte little-endian header length N, N bytes of JSON
  {"__metadata__": {...}, NAME: {"dtype": "F32", "shape": [...],
                                 "data_offsets": [BEGIN, END]}, ...}
padded with spaces to a multiple of 8, then every tensor's bytes, row-major
and little-endian, the offsets counted from the end of the header."""
import json
import struct

# torch dtype name -> (safetensors dtype, torch dtype to view the bytes as
# before numpy, which has no bfloat16)
_DTYPES = {
    "torch.float32": ("F32", None),
    "torch.float64": ("F64", None),
    "torch.float16": ("F16", None),
    "torch.bfloat16": ("BF16", "int16"),
    "torch.int64": ("I64", None),
    "torch.int32": ("I32", None),
    "torch.int16": ("I16", None),
    "torch.int8": ("I8", None),
    "torch.uint8": ("U8", None),
    "torch.bool": ("BOOL", None),
}


def tensor_bytes(t, torch):
    """The dtype name and the little-endian bytes of a tensor."""
    key = str(t.dtype)
    if key not in _DTYPES:
        raise ValueError("safetensors: no dtype for %s" % key)
    name, view = _DTYPES[key]
    t = t.detach().cpu().contiguous()
    if view is not None:
        t = t.view(getattr(torch, view))
    a = t.numpy()
    if a.dtype.byteorder == ">":
        a = a.byteswap()
    return name, a.tobytes()


def save(tensors, path, torch, metadata=None):
    """Writes tensors (an ordered mapping of name to tensor, e.g. a
    state_dict) to path."""
    header = {"__metadata__": {str(k): str(v)
                               for k, v in (metadata or {}).items()}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        dtype, data = tensor_bytes(t, torch)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
