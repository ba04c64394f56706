"""Summarises py-spy's collapsed stacks (`-f raw`: `frame;frame;... count` per line): the
share of samples under each frame (inclusive) and at the top of the stack (self), optionally
only for stacks that pass through a frame matching --under.

    python3 scripts/stacks_summary.py stacks.txt [--under async_eval] [--rows 40]
"""

import argparse
import collections
import re


def frame_name(frame):
    # py-spy writes `function (file:line)`; keep the function and the file's last part.
    m = re.match(r"(.*?) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    func, path = m.groups()
    return f"{func} ({path.rsplit('/', 1)[-1]})"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("files", nargs="+")
    p.add_argument("--under", default=None, help="only stacks with a frame matching this regex")
    p.add_argument("--rows", type=int, default=40)
    args = p.parse_args()
    for path in args.files:
        inclusive, selfs = collections.Counter(), collections.Counter()
        total = 0
        for line in open(path):
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            frames = [frame_name(f) for f in stack.split(";")]
            if args.under:
                hit = [i for i, f in enumerate(frames) if re.search(args.under, f)]
                if not hit:
                    continue
                frames = frames[hit[0]:]
            n = int(count)
            total += n
            for f in set(frames):
                inclusive[f] += n
            selfs[frames[-1]] += n
        print(f"== {path}: {total} samples" + (f" under {args.under}" if args.under else ""))
        print("-- inclusive")
        for f, n in inclusive.most_common(args.rows):
            print(f"{100 * n / total:6.1f}%  {f}")
        print("-- self")
        for f, n in selfs.most_common(args.rows):
            print(f"{100 * n / total:6.1f}%  {f}")


if __name__ == "__main__":
    main()
