from . import sync

for name in sync() or ["(nothing changed)"]:
    print("re-embedded", name)
