"""The shipped SmolLM2 GGUF as a model folder `transformers serve` can load, converted once.

`transformers serve` 5.24 does not load the GGUF directly: its model manager reads
`config.architectures`, which transformers' GGUF loader leaves empty. Loading with `gguf_file=`,
copying the dequantized weights into a fresh `LlamaForCausalLM` and saving it (with the GGUF's
tokenizer and chat template) gives a folder it serves. The folder is cached under the XDG cache,
keyed by the GGUF's sha256 and the transformers version, and written whole or not at all.

Run in the interpreter that has torch and transformers (`scripts/setup.sh transformers` makes
`.venv-transformers`); this module imports them only inside the functions that need them:

    python -m servegate.engine.transformers_model convert            # prints the folder
    python -m servegate.engine.transformers_model serve --port 8000  # convert, then serve it
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from servegate.engine.errors import EngineError, ModelMissingError
from servegate.engine.launch import MODEL_ALIAS
from servegate.engine.model import shipped_model_path

SETUP_HINT = "bash scripts/setup.sh transformers"
# The converted folder's marker: written last, so a folder without it is an interrupted conversion.
DONE_MARKER = "servegate-conversion.txt"
_CHUNK_BYTES = 1 << 20


class TransformersMissingError(EngineError):
    """torch or transformers is not importable in this interpreter."""

    exit_code = 2


def default_cache_root() -> Path:
    """`$XDG_CACHE_HOME/servegate/transformers` (default `~/.cache/servegate/transformers`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servegate" / "transformers"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _transformers_version() -> str:
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise TransformersMissingError(
            f"{exc.name or 'transformers'} is not installed in {sys.executable}; run: {SETUP_HINT}"
        ) from exc
    return str(transformers.__version__)


def converted_dir(gguf: Path, cache_root: Path, transformers_version: str) -> Path:
    """Where the conversion of `gguf` by this transformers version lives."""
    return cache_root / f"{gguf.stem}-{file_sha256(gguf)[:16]}-transformers-{transformers_version}"


def convert(gguf: Path | None = None, cache_root: Path | None = None) -> Path:
    """The converted model folder for `gguf` (default: the shipped model), made if missing."""
    version = _transformers_version()
    source = (gguf or shipped_model_path()).resolve()
    if not source.is_file():
        raise ModelMissingError(f"GGUF file not found: {source}")
    target = converted_dir(source, cache_root or default_cache_root(), version)
    if (target / DONE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _write_converted(source, staging)
        (staging / DONE_MARKER).write_text(
            f"source: {source}\nsha256: {file_sha256(source)}\ntransformers: {version}\n"
        )
        shutil.rmtree(target, ignore_errors=True)  # an interrupted earlier attempt
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_converted(gguf: Path, out: Path) -> None:
    # Never reach a hub: everything comes from the local GGUF file.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if config.model_type != "llama":
        raise EngineError(f"{gguf.name}: model type {config.model_type!r}, only llama is converted")
    config.architectures = ["LlamaForCausalLM"]
    fresh = LlamaForCausalLM(config)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # A tied lm_head is rebuilt from the embeddings; anything else missing is a broken conversion.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise EngineError(
            f"{gguf.name}: weights do not match LlamaForCausalLM "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))


def served_link(model_dir: Path, name: str) -> Path:
    """A link `served/NAME` beside the converted folders, pointing at `model_dir`.

    `transformers serve` names its model by the path it was given; served from the link's folder
    as a relative path, it answers to NAME — the name the llama.cpp reference serves
    (`smollm2-135m-instruct`), since servegate sends one model name to both sides.
    """
    if not name or "/" in name or name.startswith("."):
        raise EngineError(f"--served-name {name!r}: give a plain name, without '/'")
    link = model_dir.parent / "served" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    staged = link.with_name(f".{name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    staged.symlink_to(model_dir)
    staged.replace(link)  # atomic: a concurrent launch sees the old link or the new one
    return link


def serve_argv(name: str, port: int, host: str = "127.0.0.1") -> list[str]:
    """`transformers serve NAME` on the CPU (the CLI next to this interpreter), run in the
    folder that holds the `served/NAME` link."""
    cli = Path(sys.executable).with_name("transformers")
    program = str(cli) if cli.exists() else "transformers"
    return [program, "serve", name, "--host", host, "--port", str(port), "--device", "cpu"]


def main(argv: list[str] | None = None) -> int:
    """`convert` prints the converted folder; `serve` converts, then execs transformers serve."""
    parser = argparse.ArgumentParser(prog="python -m servegate.engine.transformers_model")
    parser.add_argument("action", choices=["convert", "serve"])
    parser.add_argument("--gguf", type=Path, default=None, help="default: the shipped SmolLM2")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: XDG cache")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-name", default=MODEL_ALIAS, help="the model name it answers to")
    args = parser.parse_args(argv)
    try:
        folder = convert(args.gguf, args.cache_dir)
        link = served_link(folder, args.served_name) if args.action == "serve" else None
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if link is None:
        print(folder)
        return 0
    command = serve_argv(args.served_name, args.port, args.host)
    print(f"servegate: serving {folder} as {args.served_name}: {' '.join(command)}", flush=True)
    os.chdir(link.parent)
    os.environ["HF_HUB_OFFLINE"] = "1"  # the model is local; never reach a hub
    os.execvp(command[0], command)  # the engine keeps this process id (and its process group)


if __name__ == "__main__":
    sys.exit(main())
