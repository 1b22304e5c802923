"""A child process of the store, ledger and filesystem tests (formerly a string in test_hostile.py)."""
import sys, time
from raydp.ledger import Ledger
led = Ledger(sys.argv[1])
with led._locked():
    doc = led._read()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    doc["entries"].append({"id": 99, "time": "t", "status": "released", "epsilon": 0.6, "delta": 0.0,
                           "gamma": 0.1, "mechanism": "laplace", "sensitivity": 1.0, "estimate": None,
                           "sample": None, "label": "held"})
    led._write(doc)
