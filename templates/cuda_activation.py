# Written into install.sh by cudalock: conda activation scripts that point torch's extension
# builder (and so DeepSpeed's ops built just in time) at conda-forge's CUDA, which keeps its
# headers and libraries in $CONDA_PREFIX/targets/<arch>-linux/ where torch does not look
# (it takes CUDA_HOME/include; CUDA_INC_PATH in newer releases). Argument: the <arch>-linux.
import os
import sys
from pathlib import Path

if not os.environ.get("CONDA_PREFIX"):
    print("cudalock: not in a conda environment (CONDA_PREFIX is unset): no activation script")
    raise SystemExit(0)
prefix = Path(os.environ["CONDA_PREFIX"])
targets = f"targets/{sys.argv[1]}"
if not (prefix / targets / "include").is_dir():
    print(f"cudalock: no CUDA headers in {prefix / targets / 'include'}; no activation script")
    raise SystemExit(0)
VARIABLES = ("CUDA_HOME", "CUDA_INC_PATH", "CPATH", "LIBRARY_PATH")
activate = [
    "# cudalock: torch's extension builder uses conda-forge's CUDA in this environment.",
    *(f'export CUDALOCK_SAVED_{v}="${{{v}-}}" CUDALOCK_HAD_{v}="${{{v}+1}}"' for v in VARIABLES),
    'export CUDA_HOME="$CONDA_PREFIX"',
    f'export CUDA_INC_PATH="$CONDA_PREFIX/{targets}/include"',
    f'export CPATH="$CONDA_PREFIX/{targets}/include${{CPATH:+:$CPATH}}"',
    f'export LIBRARY_PATH="$CONDA_PREFIX/{targets}/lib${{LIBRARY_PATH:+:$LIBRARY_PATH}}"',
]
deactivate = ["# cudalock: the variables as they were before activation."]
for v in VARIABLES:
    deactivate += [
        f'if [ -n "${{CUDALOCK_HAD_{v}-}}" ]; then export {v}="$CUDALOCK_SAVED_{v}"; '
        f"else unset {v}; fi",
        f"unset CUDALOCK_SAVED_{v} CUDALOCK_HAD_{v}",
    ]
for kind, lines in (("activate", activate), ("deactivate", deactivate)):
    path = prefix / "etc" / "conda" / f"{kind}.d" / "cudalock-cuda.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"cudalock: wrote {path}")
