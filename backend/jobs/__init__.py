"""Work done on a run's checkpoints after training: merge, chat, batch inference.

    job.py          a tracked job folder under <run>/jobs/ (spec, state.json, output.log)
    supervise.py    a job's part in the one supervisor (backend/runs/supervise.py): its command, how it
                    ended, its typed finishing step
    merge.py        `swift export --merge_lora` into a new folder; the merged-model records
    targets.py      what to load: base model + adapter, a merged model, a model folder
    chat_worker.py  the long-lived model process speaking JSON lines (imports swift)
    chat.py         the client that starts, streams from, stops and kills a chat worker
    batch_infer.py  inference over a dataset into a results jsonl (prompt / reference / answer)

Nothing here imports torch or swift at module level except chat_worker.py and the worker
half of batch_infer.py, which only ever run in their own subprocess.
"""
