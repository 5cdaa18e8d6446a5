#!/usr/bin/env python3
"""llama.cpp's own checkpoint converter (convert_hf_to_gguf.py from the pinned llama-cpp-python
sdist's source tree), run on a test model whose tokenizer llama.cpp cannot recognise.

The converter names a BPE tokenizer's pre-tokenizer by hashing its output on a fixed text, and
knows only published tokenizers; the fixtures' tiny tokenizer is trained for the tests, so the
converter stops. Its split pattern is Qwen2's, so this wrapper answers "qwen2" through the
converter's own method, without touching the vendored files, then runs the converter's main.

    python tests/llama_cpp/convert.py LLAMA_CPP_SRC MODEL_DIR --outfile F.gguf --outtype f32 [--mmproj]
"""
import sys
from pathlib import Path


def main() -> None:
    src = Path(sys.argv[1])
    sys.path.insert(0, str(src))
    sys.path.insert(1, str(src / "gguf-py"))
    from conversion import base

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
