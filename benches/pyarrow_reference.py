"""The reference for benches/pipeline.sh: pyarrow writing the same table with the same settings.

Reads the shards bpals-release wrote (not timed), then times pyarrow writing the same rows into
the same number of files with the same writer settings, and prints the seconds as JSON.
"""
import json
import sys
import tempfile
import time

import pyarrow.parquet as pq


def main():
    report = json.load(open(sys.argv[1]))
    out_dir = report["out"]
    writer = report["writer"]
    tables = [pq.read_table(f"{out_dir}/{path}") for path in report["shards"]]
    rows = sum(t.num_rows for t in tables)
    assert rows == report["rows"], (rows, report["rows"])
    best = None
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(3):
            start = time.perf_counter()
            for i, table in enumerate(tables):
                pq.write_table(
                    table,
                    f"{tmp}/{i}.parquet",
                    row_group_size=writer["row_group_rows"],
                    compression=writer["compression"],
                    compression_level=writer["compression_level"],
                    use_dictionary=True,
                    write_statistics=True,
                    data_page_size=1024 * 1024,
                    data_page_version="1.0",
                )
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
    print(json.dumps({"rows": rows, "files": len(tables), "pyarrow_write_seconds": best}))


if __name__ == "__main__":
    main()
