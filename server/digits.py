"""Decimals kept in JSON, named by what a number is for, so that every panel and tool agree.
`common.rounded(tensor, digits)` and `round(x, digits)` take these, never a bare number."""

COARSE = 4  # drawn as a colour or a length: attention weights, norms, embeddings, logits, histograms
VALUE = 5  # read as numbers: activations, q/k/v, scores, losses, contributions
FINE = 6  # small numbers read exactly: probabilities, variances, frequencies
EXACT = 12  # formulas on /learn: what float64 holds, less the noise of the last digits
SIMILARITY = 3  # cosine similarities drawn as a big heatmap (positions x positions)
SECONDS = 2  # elapsed wall-clock times
