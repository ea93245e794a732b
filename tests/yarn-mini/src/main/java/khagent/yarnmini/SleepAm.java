// SPDX-License-Identifier: Apache-2.0
package khagent.yarnmini;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.PreemptionContainer;
import org.apache.hadoop.yarn.api.records.PreemptionMessage;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.NMClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * A minimal ApplicationMaster: asks for COUNT containers of MEMORY_MB, VCORES
 * and GPUS (yarn.io/gpu), runs `sleep` in each, never asks again for one that
 * ends, and keeps writing what it saw to $KHAGENT_STATUS_FILE as JSON:
 * {"am","ready","running":[ids],"completed":[{"id","exit","diagnostics"}],
 *  "preempt":[ids the RM asked it to give back]}. It runs until killed.
 *
 * Usage: SleepAm COUNT MEMORY_MB VCORES GPUS
 */
public final class SleepAm {
  public static void main(String[] args) throws Exception {
    int count = Integer.parseInt(args[0]);
    Resource each = Resource.newInstance(Long.parseLong(args[1]), Integer.parseInt(args[2]));
    long gpus = Long.parseLong(args[3]);
    Path statusFile = Path.of(System.getenv("KHAGENT_STATUS_FILE"));
    String self = System.getenv(ApplicationConstants.Environment.CONTAINER_ID.name());

    YarnConfiguration conf = new YarnConfiguration();
    AMRMClient<ContainerRequest> rm = AMRMClient.createAMRMClient();
    rm.init(conf);
    rm.start();
    rm.registerApplicationMaster("", 0, "");  // also loads the RM's resource types
    if (gpus > 0) each.setResourceValue(MiniCluster.GPU, gpus);
    NMClient nm = NMClient.createNMClient();
    nm.init(conf);
    nm.start();
    for (int i = 0; i < count; i++) {
      rm.addContainerRequest(new ContainerRequest(each, null, null, Priority.newInstance(1)));
    }

    Set<String> running = new LinkedHashSet<>();
    Map<String, String> completed = new LinkedHashMap<>();
    Set<String> preempt = new LinkedHashSet<>();
    int allocated = 0;
    String last = "";
    for (;;) {
      AllocateResponse r = rm.allocate(0.5f);
      for (Container c : r.getAllocatedContainers()) {
        if (allocated >= count) {
          rm.releaseAssignedContainer(c.getId());
          continue;
        }
        allocated++;
        rm.removeContainerRequest(new ContainerRequest(each, null, null, Priority.newInstance(1)));
        ContainerLaunchContext ctx = ContainerLaunchContext.newInstance(Collections.emptyMap(),
            Collections.emptyMap(), List.of("exec sleep 900"), null, null, null);
        nm.startContainer(c, ctx);
        running.add(c.getId().toString());
      }
      for (ContainerStatus s : r.getCompletedContainersStatuses()) {
        String id = s.getContainerId().toString();
        running.remove(id);
        completed.put(id, "{\"id\":\"" + id + "\",\"exit\":" + s.getExitStatus() + ",\"diagnostics\":\""
            + json(s.getDiagnostics()) + "\"}");
      }
      PreemptionMessage pm = r.getPreemptionMessage();
      if (pm != null) {
        List<PreemptionContainer> pcs = new ArrayList<>();
        if (pm.getStrictContract() != null) pcs.addAll(pm.getStrictContract().getContainers());
        if (pm.getContract() != null) pcs.addAll(pm.getContract().getContainers());
        for (PreemptionContainer pc : pcs) preempt.add(pc.getId().toString());
      }
      boolean ready = allocated >= count && running.size() + completed.size() >= count;
      String doc = "{\"am\":\"" + self + "\",\"ready\":" + ready + ",\"running\":" + list(running)
          + ",\"completed\":[" + String.join(",", completed.values()) + "],\"preempt\":"
          + list(preempt) + "}";
      if (!doc.equals(last)) {
        Path tmp = statusFile.resolveSibling(statusFile.getFileName() + ".tmp");
        Files.writeString(tmp, doc + "\n");
        Files.move(tmp, statusFile, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        last = doc;
      }
      if (r.getAMCommand() != null) break;  // the RM wants this AM gone
      Thread.sleep(200);
    }
    rm.unregisterApplicationMaster(FinalApplicationStatus.KILLED, "", "");
  }

  private static String list(Set<String> ids) {
    StringBuilder sb = new StringBuilder("[");
    for (String id : ids) sb.append(sb.length() > 1 ? "," : "").append('"').append(id).append('"');
    return sb.append(']').toString();
  }

  private static String json(String s) {
    StringBuilder sb = new StringBuilder();
    for (char c : (s == null ? "" : s).toCharArray()) {
      if (c == '"' || c == '\\') sb.append('\\').append(c);
      else if (c < 0x20) sb.append(' ');
      else sb.append(c);
    }
    return sb.toString();
  }
}
