// rmqtool test probe: replays a script of ConcurrentHashMap operations on the running JVM and prints the
// iteration order after every "dump", so engine/java/concurrent.py can be checked against a real JVM.
//
// Script lines (one operation each):
//   case NAME TYPE CTOR      start a map; TYPE is L (Long keys), I (Integer) or S (String);
//                            CTOR is "new", "cap:N" (new ConcurrentHashMap<>(N)) or "copy:K1,K2,..."
//                            (new ConcurrentHashMap<>(a LinkedHashMap holding K1, K2, ... in that order))
//   put K | pia K | cia K | rem K     put, putIfAbsent, computeIfAbsent, remove
//   putall K1,K2,...                 putAll from a LinkedHashMap in that order
//   dump                             print "NAME: k1,k2,..." (iteration order)
import java.io.BufferedReader;
import java.io.FileReader;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

public class ChmOrderProbe {
    private static Object key(char type, String text) {
        switch (type) {
            case 'L': return Long.parseLong(text);
            case 'I': return Integer.parseInt(text);
            default: return text;
        }
    }

    private static Map<Object, String> ordered(char type, String list) {
        Map<Object, String> m = new LinkedHashMap<>();
        if (!list.isEmpty()) {
            for (String k : list.split(",", -1)) {
                m.put(key(type, k), "v");
            }
        }
        return m;
    }

    public static void main(String[] args) throws Exception {
        ConcurrentHashMap<Object, String> map = null;
        String name = "";
        char type = 'S';
        StringBuilder out = new StringBuilder();
        try (BufferedReader r = new BufferedReader(new FileReader(args[0]))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] p = line.split(" ", 4);
                switch (p[0]) {
                    case "case":
                        name = p[1];
                        type = p[2].charAt(0);
                        if (p[3].equals("new")) {
                            map = new ConcurrentHashMap<>();
                        } else if (p[3].startsWith("cap:")) {
                            map = new ConcurrentHashMap<>(Integer.parseInt(p[3].substring(4)));
                        } else {
                            map = new ConcurrentHashMap<>(ordered(type, p[3].substring(5)));
                        }
                        break;
                    case "put": map.put(key(type, p[1]), "v"); break;
                    case "pia": map.putIfAbsent(key(type, p[1]), "v"); break;
                    case "cia": map.computeIfAbsent(key(type, p[1]), k -> "v"); break;
                    case "rem": map.remove(key(type, p[1])); break;
                    case "putall": map.putAll(ordered(type, p[1])); break;
                    case "dump":
                        List<String> keys = new ArrayList<>();
                        for (Object k : map.keySet()) {
                            keys.add(String.valueOf(k));
                        }
                        out.append(name).append(": ").append(String.join(",", keys)).append('\n');
                        break;
                    default:
                        throw new IllegalArgumentException("bad line: " + line);
                }
            }
        }
        System.out.print(out);
    }
}
