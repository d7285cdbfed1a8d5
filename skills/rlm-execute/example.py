# A small analysis script, executed as a whole by the `file` pattern of rlm-execute.
import statistics

readings = [12.5, 13.1, 11.8, 14.2, 13.7, 12.9, 15.0, 13.3]
summary = {
    "n": len(readings),
    "mean": round(statistics.mean(readings), 3),
    "max": max(readings),
    "above_13": sum(1 for r in readings if r > 13),
}
print("summary:", summary)
SUBMIT(summary=summary)
