"""File safety, the bottom layer every command writes through: reading text corpora line by line with the
file and line named on bad input (:mod:`.corpus`), atomic writes and file-system faults as sentences
(:mod:`.files`), and outputs that resume where they stopped (:mod:`.resumable`). Imports nothing from
structnmt but :mod:`structnmt.errors`."""
