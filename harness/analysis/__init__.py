"""Reading result folders back into answers: comparisons, reports, the regression gate.
Reads run folders only; never imports the engine."""
