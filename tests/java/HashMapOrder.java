// Prints the iteration order of java.util.HashMap / HashSet for key lists read on stdin, so that
// engine/java/collections.py can be checked against a real JVM (tests/test_java.py, tests/java/orders.py).
//
// Input, one case per line:  <mode> <capacity> <key> <key> ...
//   mode      set    : new HashSet<>(capacity), add() each key
//             setall : new HashSet<>(capacity), addAll(Arrays.asList(keys))
//             map    : new HashMap<>(capacity), put(key, key) each key
//             remap  : new HashMap<>(), put each key; then new HashMap<>(capacity), put the keys in the first
//                      map's iteration order (what a broker does with a producer's properties:
//                      messageProperties2String on the client, string2messageProperties on the broker)
//   capacity  "-" for the no-argument constructor, else the initial capacity
//   key       "x" followed by the key's UTF-16 code units, 4 hex digits each ("x" alone is the empty string)
// Output, one JSON line per case: {"mode", "capacity", "keys", "order", "tableLength", "treeBins"}, strings
// with every character outside printable ASCII written as \\uXXXX. tableLength and treeBins (buckets that
// hold TreeNode bins) are read by reflection: run with --add-opens java.base/java.util=ALL-UNNAMED.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;

public class HashMapOrder {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isEmpty()) {
                continue;
            }
            String[] tok = line.split(" ");
            String mode = tok[0];
            Integer cap = tok[1].equals("-") ? null : Integer.valueOf(tok[1]);
            List<String> keys = new ArrayList<>();
            for (int i = 2; i < tok.length; i++) {
                keys.add(decode(tok[i]));
            }
            HashMap<String, String> map = run(mode, cap, keys);
            out.append("{\"mode\":\"").append(mode).append("\",\"capacity\":")
               .append(cap == null ? "null" : cap.toString()).append(",\"keys\":");
            json(out, keys);
            out.append(",\"order\":");
            json(out, map.keySet());
            Object[] table = table(map);
            out.append(",\"tableLength\":").append(table.length).append(",\"treeBins\":[");
            String sep = "";
            for (int i = 0; i < table.length; i++) {
                if (table[i] != null && table[i].getClass().getSimpleName().equals("TreeNode")) {
                    out.append(sep).append(i);
                    sep = ",";
                }
            }
            out.append("]}\n");
        }
        System.out.print(out);
    }

    @SuppressWarnings("unchecked")
    static HashMap<String, String> run(String mode, Integer cap, List<String> keys) throws Exception {
        switch (mode) {
            case "set":
            case "setall": {
                HashSet<String> set = cap == null ? new HashSet<>() : new HashSet<>(cap);
                if (mode.equals("set")) {
                    for (String k : keys) {
                        set.add(k);
                    }
                } else {
                    set.addAll(Arrays.asList(keys.toArray(new String[0])));
                }
                Field f = HashSet.class.getDeclaredField("map");
                f.setAccessible(true);
                return (HashMap<String, String>) f.get(set);
            }
            case "map": {
                HashMap<String, String> map = cap == null ? new HashMap<>() : new HashMap<>(cap);
                for (String k : keys) {
                    map.put(k, k);
                }
                return map;
            }
            case "remap": {
                HashMap<String, String> client = new HashMap<>();
                for (String k : keys) {
                    client.put(k, k);
                }
                HashMap<String, String> broker = cap == null ? new HashMap<>() : new HashMap<>(cap);
                for (Map.Entry<String, String> e : client.entrySet()) {
                    broker.put(e.getKey(), e.getValue());
                }
                return broker;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static Object[] table(HashMap<String, String> map) throws Exception {
        Field f = HashMap.class.getDeclaredField("table");
        f.setAccessible(true);
        Object[] t = (Object[]) f.get(map);
        return t == null ? new Object[0] : t;
    }

    static String decode(String tok) {
        if (tok.charAt(0) != 'x' || (tok.length() - 1) % 4 != 0) {
            throw new IllegalArgumentException("bad key token " + tok);
        }
        char[] units = new char[(tok.length() - 1) / 4];
        for (int i = 0; i < units.length; i++) {
            units[i] = (char) Integer.parseInt(tok.substring(1 + 4 * i, 5 + 4 * i), 16);
        }
        return new String(units);
    }

    static void json(StringBuilder out, Collection<String> items) {
        out.append('[');
        String sep = "";
        for (String s : items) {
            out.append(sep).append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                    out.append(c);
                } else {
                    out.append(String.format("\\u%04x", (int) c));
                }
            }
            out.append('"');
            sep = ",";
        }
        out.append(']');
    }
}
