import sys
store, off = sys.argv[1], int(sys.argv[2])
seg = 16777216
p = f"{store}/commitlog/{off//seg*seg:020d}"
with open(p, "r+b") as f:
    f.seek(off % seg + 4); old = f.read(64); f.seek(off % seg + 4); f.write(b"\0"*64)
print("tore", p, "at", off % seg + 4, "64 bytes; old first 16:", old[:16].hex())
