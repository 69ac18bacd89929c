"""Counts of k_hat in Dendrogram_SGMoE's committed experiment-6 JSONs (fetched with the `fetch` tool
to /work/.mirror/maitrungnguyen+Dendrogram_SGMoE; read with git, nothing of theirs is committed here).

    python records/selection/peer_exp6/peer_counts.py > records/selection/peer_exp6/peer_counts.json
"""

import collections
import json
import subprocess
import sys

from moestat.cli.common import ArgumentParser

REPO = "/work/.mirror/maitrungnguyen+Dendrogram_SGMoE/repo"
FOLDER = "data/experiment 6/dsc_aic_bic_icl_K5_100_10000_32"


def main(argv: list[str] | None = None) -> int:
    # no options: anything given is refused (one line, exit 2, the doors' parser)
    ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    names = subprocess.run(["git", "-C", REPO, "ls-tree", "--name-only", f"HEAD:{FOLDER}"], capture_output=True,
                           text=True, check=True).stdout.split()
    counts = {c: collections.defaultdict(collections.Counter) for c in ("dic", "aic", "bic", "icl")}
    times = []
    for name in names:
        d = json.loads(subprocess.run(["git", "-C", REPO, "show", f"HEAD:{FOLDER}/{name}"], capture_output=True,
                                      text=True, check=True).stdout)
        times.append(d["time_elapsed"])
        for c in counts:
            for n, k in d[f"argmin_{c}"]:
                counts[c][int(n)][int(k)] += 1
    out = {"source": f"maitrungnguyen/Dendrogram_SGMoE {FOLDER}", "trials": len(names),
           "time_elapsed_s": {"median": sorted(times)[len(times) // 2], "min": min(times), "max": max(times)},
           "counts": {c: {str(n): dict(sorted(v.items())) for n, v in sorted(by_n.items())} for c, by_n in counts.items()}}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
