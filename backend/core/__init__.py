"""The ground every room stands on: stdlib, psutil and pydantic only, no other room imported.

    paths.py            where things live: the package, the data and cache folders, built-in names
    fs.py               the one atomic writer, the one file lock, folder sizes
    tail.py             the one reader of growing files (whole lines, incremental UTF-8, FileMark)
    units.py            sizes and durations said one way
    safe_text.py        text from data made safe to show (never markup)
    process_identity.py who a process is: host, boot id, start time, marker
    shell_words.py      shell words of a command line (quoting, a flag's value)
"""
