#!/bin/sh
# Record the request logs the books studies replay: SmolLM2 run here at three temperatures.
# Takes a few minutes per temperature on two CPU cores; run from the repository root.
set -e
for t in 0.0 0.7 1.0; do
  out="runs/books-record-t$t"
  sed "s/^  temperature: .*/  temperature: $t/" studies/books/smollm2.yaml > studies/books/.record-t$t.yaml
  memrisk books run "studies/books/.record-t$t.yaml" --out "$out" --force
  rm "studies/books/.record-t$t.yaml"
  cp "$out/requests.jsonl" "studies/data/books/smollm2-t$t.requests.jsonl"
done
