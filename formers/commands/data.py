"""`formers data list | get | info`: which corpora there are, which are here, downloading."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers data`."""
    p = sub.add_parser("data", help="list, download or inspect corpora")
    p.add_argument("action", choices=["list", "get", "info"])
    p.add_argument("name", nargs="?", help="corpus name (get, info)")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.set_defaults(func=cmd_data)


def cmd_data(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.data import CORPORA, PARALLEL_CORPORA, fetch
    from formers.data.locate import data_dir

    if args.action == "list":
        for name, spec in {**CORPORA, **PARALLEL_CORPORA}.items():
            where = "present" if spec.present(args.data_dir) else "missing"
            print(f"{name:18s} {where:8s} {spec.description}")
            if where == "missing":
                print(f"{'':27s} get it: {spec.how_to_get(name)}")
        print(f"\ndata folder: {data_dir(args.data_dir)}  (any text file or folder path works too)")
    elif args.action == "get":
        path = fetch(args.name, args.data_dir)
        print(f"{args.name} is ready at {path}")
    elif args.action == "info" and args.name in PARALLEL_CORPORA:
        from formers.data import load_translation_corpus

        print(load_translation_corpus(args.name, args.data_dir))
    elif args.action == "info":
        from formers.data import load_corpus

        print(load_corpus(args.name, args.data_dir))
    return 0
