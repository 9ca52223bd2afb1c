"""`agl crawl`: a candidate manifest from the Internet Archive's aporee collection."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.errors import AglError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crawl",
        help="build a candidate manifest from the Archive's aporee collection",
        description=(
            "List the collection (scrape or advanced search API), read each item's metadata "
            "(coordinates, title, description, MP3 and duration), reverse-geocode offline, and "
            "write a manifest in the AGL1K schema. Category columns stay empty for the tag stage."
        ),
    )
    p.add_argument("--out", type=Path, required=True, help="manifest CSV to write")
    p.add_argument("--report", type=Path, help="write what was skipped and why (JSON)")
    p.add_argument("--archive-url", default="https://archive.org",
                   help="the Archive (or a mirror/fake) serving search and metadata APIs")
    p.add_argument("--collection", default="aporee")
    p.add_argument("--search-api", choices=("scrape", "advancedsearch"), default="scrape")
    p.add_argument("--page-size", type=int, default=1000)
    p.add_argument("--limit", type=int, help="stop after this many items")
    p.add_argument("--jobs", type=int, default=4, help="metadata requests in flight")
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--timeout-s", type=float, default=60.0, help="per read (connect, each read)")
    p.add_argument("--deadline-s", type=float, default=300.0,
                   help="longest one request may take, headers and body")
    p.add_argument("--max-document-bytes", type=int, default=20_000_000,
                   help="largest search page or metadata record read")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.dataset.crawl import CrawlConfig, crawl, print_report, write_report
    from agl.dataset.fetch import Policy
    from agl.dataset.manifest import write_manifest

    if args.page_size <= 0 or args.jobs <= 0 or (args.limit is not None and args.limit <= 0):
        raise AglError("--page-size, --jobs and --limit must be positive")
    if min(args.timeout_s, args.deadline_s, args.max_document_bytes) <= 0:
        raise AglError("--timeout-s, --deadline-s and --max-document-bytes must be positive")
    config = CrawlConfig(
        archive_url=args.archive_url, collection=args.collection, search_api=args.search_api,
        page_size=args.page_size, limit=args.limit, jobs=args.jobs,
    )  # fmt: skip
    policy = Policy(jobs=args.jobs, retries=args.retries, timeout_s=args.timeout_s,
                    deadline_s=args.deadline_s, max_document_bytes=args.max_document_bytes,
                    param="--", progress=False)  # fmt: skip
    frame, report = crawl(config, policy)
    if frame.empty:
        raise AglError(f"crawl: none of {report.listed} item(s) had coordinates and an MP3; "
                       "nothing to write (see --report for the reasons)")  # fmt: skip
    write_manifest(frame, args.out)
    if args.report:
        write_report(args.report, report)
    print_report(report)
    return 0
